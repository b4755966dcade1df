import { Logger, type NestApplicationOptions } from '@nestjs/common';
import type { ApplicationConfig } from '@nestjs/core';
import { ExpressAdapter } from '@nestjs/platform-express';
import type { Express, NextFunction, RequestHandler, Response } from 'express';
import { createServer, IncomingMessage, type Server, ServerResponse } from 'node:http';
import type { ApiRequest } from './request-context';
import { enhancersOf, type EnhancerKind, type NestHandler, type RouteEnhancer } from './route-enhancers';

/**
 * A route served by the HTTP server's request listener itself, in front of Express's router
 * and Nest's pipeline (guards, interceptors and filters through RxJS): those cost a fifth to
 * a quarter of a chat completion's CPU here (bench/README.md, chat.ts). A request it takes still
 * goes through the same middleware as every other request (request id, metrics, logging,
 * body parsing and its checks: the list createApp gives Express), with Express's request and
 * response objects, and its errors go to the same filter. Middleware that calls
 * `next('route')` or `next('router')` (none does) would be taken for an error.
 *
 * It fails closed: Nest's route for the same handler may gain a guard, an interceptor, a pipe
 * or a filter (global or its own) that this code does not run; serveDirectRoutes then refuses
 * to start, naming it, unless the route lists it in `runs`.
 */
export interface DirectRoute {
  method: string;
  /** The path without BASE_PATH; the query string is ignored. */
  path: string;
  /** The Nest route it stands in for (the controller's handler), whose enhancers are checked against `runs` at start. */
  handler: NestHandler;
  /** Every enhancer of that Nest route it runs, or knowingly does without, each with why: anything else refuses the start. */
  runs: readonly KnownEnhancer[];
  /** Where the route is written (and `runs` is to be extended), for the refusal's message. */
  source: string;
  /** False leaves this request to Express and Nest (a feature the direct route does not have, an Idempotency-Key say). */
  accepts(req: IncomingMessage): boolean;
  /** Runs after the middleware; answers, or throws for the error filter to answer. */
  handle(req: ApiRequest, res: Response): Promise<void>;
}

export interface DirectRouting {
  /** The Express application Nest made: the server's request listener until now, and the one for every other request. */
  app: Express;
  /** What Express runs before its routes, in order (createApp's list). */
  middleware: RequestHandler[];
  /** Answers an error of the middleware or of a handler (ApiExceptionFilter.respond). */
  onError(error: unknown, req: ApiRequest, res: Response): void;
  basePath: string;
  routes: DirectRoute[];
  /** Nest's global enhancers (`app.get(ApplicationConfig)`), complete: after the last `useGlobal*`. */
  application: ApplicationConfig;
}

/** An enhancer a direct route runs (or knowingly replaces or does without), by kind and class. */
export interface KnownEnhancer {
  kind: EnhancerKind;
  type: abstract new (...args: never[]) => unknown;
  /** How the direct route runs it, or why it need not. */
  why: string;
}

/** The direct routes would skip what Nest runs around their handlers: the service must not start (`problems` names each). */
export class DirectRouteRefused extends Error {
  constructor(readonly problems: string[]) {
    super(`The direct route refuses to serve:\n${problems.map((problem) => `  - ${problem}`).join('\n')}`);
    this.name = 'DirectRouteRefused';
  }
}

/** What Nest runs around each route's handler that the route does not list in `runs`, said for an operator (empty: none). */
export function unrunEnhancers(routes: readonly DirectRoute[], application: ApplicationConfig): string[] {
  return routes.flatMap((route) =>
    enhancersOf(application, route.handler)
      .filter((enhancer) => !route.runs.some((known) => known.kind === enhancer.kind && known.type === enhancer.type))
      .map(
        (enhancer: RouteEnhancer) =>
          `the direct route of ${route.method} ${route.path} does not run the ${enhancer.scope} ${enhancer.kind} ${enhancer.name}` +
          ` (${enhancer.scope === 'global' ? 'an APP_* provider or app.useGlobal*' : `on ${route.handler.controller.name}.${route.handler.method}`}):` +
          ` teach the route to run it and list it in its \`runs\` (${route.source}), or set DIRECT_ROUTE=off`,
      ),
  );
}

const logger = new Logger('HTTP');

/**
 * Nest's Express adapter, with an HTTP server that makes its requests and responses with the
 * Express application's prototypes (Node's `IncomingMessage` and `ServerResponse` options).
 * Express switches every request and response to `app.request` and `app.response` with
 * Object.setPrototypeOf, and the direct route did too; V8 gives each switched object a hidden
 * class of its own, so that every later property access on it, in Node's HTTP code and ours,
 * took the slow path. Here the server's classes inherit the application's methods, and
 * `app.request` and `app.response` become their prototypes: the switch finds them in place
 * and changes nothing, on every route.
 */
export class ExpressPrototypesAdapter extends ExpressAdapter {
  override initHttpServer(options: NestApplicationOptions): void {
    // Neither is used here: Nest's own server then, with the switches.
    if (options.httpsOptions || options.forceCloseConnections) return super.initHttpServer(options);
    const app = this.getInstance<Express>();
    const Request = inheriting(IncomingMessage, app.request, 'ExpressRequest');
    const Response = inheriting(ServerResponse, app.response, 'ExpressResponse');
    // As express() made app.request and app.response: with the application as an own property
    // (`req.app`), which mounting the application in another one would otherwise cut off.
    for (const prototype of [Request.prototype, Response.prototype]) {
      Object.defineProperty(prototype, 'app', { configurable: true, enumerable: true, writable: true, value: app });
    }
    app.request = Request.prototype as Express['request'];
    app.response = Response.prototype as Express['response'];
    this.httpServer = createServer({ IncomingMessage: Request, ServerResponse: Response }, app);
  }
}

/** A subclass of `base`, named `name`, whose instances also have `methods` (an object whose own prototype is base's). */
function inheriting<T>(base: T, methods: object, name: string): T {
  const subclass = class extends (base as unknown as new (...args: unknown[]) => object) {};
  Object.defineProperty(subclass, 'name', { value: name });
  Object.setPrototypeOf(subclass.prototype, methods);
  return subclass as unknown as T;
}

/**
 * Puts the direct routes in front of Express as the server's request listener; refuses
 * (DirectRouteRefused) if Nest would run anything around their handlers that they do not.
 * The check is made here, once: nothing of it is left for the requests.
 */
export function serveDirectRoutes(server: Server, routing: DirectRouting): void {
  const { app, basePath } = routing;
  const unrun = unrunEnhancers(routing.routes, routing.application);
  if (unrun.length > 0) throw new DirectRouteRefused(unrun);
  if (!server.listeners('request').includes(app)) throw new Error('The HTTP server does not hand its requests to this Express application');
  refuseLaterGlobalEnhancers(routing.application);
  server.removeListener('request', app);
  server.on('request', (req: IncomingMessage, res: ServerResponse) => {
    const route = routing.routes.find((candidate) => matches(candidate, req, basePath));
    if (route) serve(route, req, res, routing);
    else app(req, res);
  });
}

/**
 * The check above sees the global enhancers added so far; one added later with
 * `app.useGlobal*` (in main.ts, say) would be run by Nest's routes and skipped here: that
 * call throws instead, saying where to add it.
 */
function refuseLaterGlobalEnhancers(application: ApplicationConfig): void {
  const refuse = (method: string) => (): never => {
    throw new Error(`app.${method}() after the direct routes were checked: add it in createApp before serveDirectRoutes (src/app.factory.ts), or set DIRECT_ROUTE=off`);
  };
  application.useGlobalGuards = refuse('useGlobalGuards');
  application.useGlobalInterceptors = refuse('useGlobalInterceptors');
  application.useGlobalPipes = refuse('useGlobalPipes');
  application.useGlobalFilters = refuse('useGlobalFilters');
}

function matches(route: DirectRoute, req: IncomingMessage, basePath: string): boolean {
  if (req.method !== route.method || req.url === undefined) return false;
  const query = req.url.indexOf('?');
  const path = query === -1 ? req.url : req.url.slice(0, query);
  return (path === route.path || (basePath !== '' && path === `${basePath}${route.path}`)) && route.accepts(req);
}

function serve(route: DirectRoute, incoming: IncomingMessage, response: ServerResponse, { app, middleware, onError }: DirectRouting): void {
  // What Express's app.handle does before the first middleware, so that the middleware and the
  // handler find the objects they were written for (on a server made by ExpressPrototypesAdapter
  // they have these prototypes already, and this changes nothing).
  Object.setPrototypeOf(incoming, app.request);
  Object.setPrototypeOf(response, app.response);
  const req = incoming as ApiRequest;
  const res = response as unknown as Response;
  req.res = res;
  res.req = req;
  res.locals ??= Object.create(null) as Response['locals'];
  req.originalUrl = req.url;
  req.baseUrl = '';
  req.params = {};
  const fail = (error: unknown) => {
    try {
      onError(error, req, res);
    } catch (failed) {
      // Express's final handler would have answered; a response half sent can only be cut.
      logger.error(`Could not answer the error of ${req.method} ${route.path} [request ${req.id}]: ${String(failed)}`);
      if (res.headersSent) res.destroy();
      else res.status(500).end();
    }
  };
  let index = 0;
  const next: NextFunction = (error?: unknown) => {
    if (error !== undefined && error !== null) return fail(error);
    const handler = middleware[index++];
    if (!handler) {
      // The route template, for the metrics' and the request log's labels: set once matched,
      // as Express does, so that a refusal of the middleware stays `unmatched`.
      req.route = { path: route.path };
      try {
        route.handle(req, res).catch(fail);
      } catch (thrown) {
        fail(thrown);
      }
      return;
    }
    try {
      const returned: unknown = handler(req, res, next);
      if (returned instanceof Promise) returned.catch(fail);
    } catch (thrown) {
      fail(thrown);
    }
  };
  next();
}
