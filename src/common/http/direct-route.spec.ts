import { type CallHandler, type ExecutionContext, type NestInterceptor } from '@nestjs/common';
import { ApplicationConfig } from '@nestjs/core';
import express, { type RequestHandler, type Response } from 'express';
import { createServer, IncomingMessage, type Server, ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { type DirectRoute, DirectRouteRefused, type DirectRouting, ExpressPrototypesAdapter, serveDirectRoutes } from './direct-route';
import type { ApiRequest } from './request-context';

/** The Nest handler the routes below stand in for: nothing of its own. */
class ThingsController {
  create(): void {}
}
const THINGS = { handler: { controller: ThingsController, method: 'create' }, runs: [], source: 'direct-route.spec.ts' };

class AuditInterceptor implements NestInterceptor {
  intercept(_context: ExecutionContext, next: CallHandler) {
    return next.handle();
  }
}

/** A real HTTP server with a real Express application behind it, as Nest makes them. */
async function serve(options: {
  middleware?: RequestHandler[];
  route?: Partial<DirectRoute>;
  basePath?: string;
  onError?: DirectRouting['onError'];
  application?: ApplicationConfig;
}) {
  const app = express();
  const middleware = options.middleware ?? [];
  for (const handler of middleware) app.use(handler);
  app.all('/{*any}', (req, res) => void res.json({ by: 'express', url: req.url }));
  const server = createServer(app);
  const errors: unknown[] = [];
  const routing: DirectRouting = {
    app,
    middleware,
    onError:
      options.onError ??
      ((error, req, res) => {
        errors.push(error);
        res.status(500).json({ error: String(error), route: (req.route as { path?: string } | undefined)?.path ?? null });
      }),
    basePath: options.basePath ?? '',
    routes: [
      {
        method: 'POST',
        path: '/v1/things',
        ...THINGS,
        accepts: () => true,
        handle: async (req: ApiRequest, res: Response) => {
          res.json({ by: 'direct', route: (req.route as { path: string }).path, url: req.url, originalUrl: req.originalUrl, seen: res.locals.seen ?? [], userAgent: req.get('user-agent') });
        },
        ...options.route,
      },
    ],
    application: options.application ?? new ApplicationConfig(),
  };
  serveDirectRoutes(server, routing);
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const base = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  const call = async (method: string, path: string, headers: Record<string, string> = {}) => {
    const response = await fetch(`${base}${path}`, { method, headers: { 'user-agent': 'spec', ...headers } });
    return { status: response.status, body: (await response.json()) as Record<string, unknown> };
  };
  return { server, call, errors };
}

/** Middleware that notes its name in res.locals.seen. */
const noting =
  (name: string): RequestHandler =>
  (_req, res, next) => {
    res.locals.seen = [...((res.locals.seen as string[] | undefined) ?? []), name];
    next();
  };

describe('serveDirectRoutes', () => {
  let server: Server | undefined;
  afterEach(async () => {
    if (!server?.listening) return;
    server.closeAllConnections();
    await new Promise((resolve) => server!.close(resolve));
  });

  it("answers its route after Express's middleware, in order, with Express's request and response, the query string ignored", async () => {
    const started = await serve({ middleware: [noting('first'), noting('second')] });
    server = started.server;
    expect(await started.call('POST', '/v1/things?x=1')).toEqual({
      status: 200,
      body: { by: 'direct', route: '/v1/things', url: '/v1/things?x=1', originalUrl: '/v1/things?x=1', seen: ['first', 'second'], userAgent: 'spec' },
    });
  });

  it('leaves every other request to Express: another method or path, or one the route does not accept', async () => {
    const started = await serve({ route: { accepts: (req) => req.headers['x-plain'] === undefined } });
    server = started.server;
    expect((await started.call('GET', '/v1/things')).body.by).toBe('express');
    expect((await started.call('POST', '/v1/things/1')).body.by).toBe('express');
    expect((await started.call('POST', '/v1/thing')).body.by).toBe('express');
    expect((await started.call('POST', '/v1/things', { 'x-plain': '1' })).body.by).toBe('express');
    expect((await started.call('POST', '/v1/things')).body.by).toBe('direct');
  });

  it('takes its path under BASE_PATH too, which the middleware then strips', async () => {
    const strip: RequestHandler = (req, _res, next) => {
      if (req.url.startsWith('/base/')) req.url = req.url.slice('/base'.length);
      next();
    };
    const started = await serve({ middleware: [strip], basePath: '/base' });
    server = started.server;
    expect((await started.call('POST', '/base/v1/things')).body).toMatchObject({ by: 'direct', url: '/v1/things', originalUrl: '/base/v1/things' });
    expect((await started.call('POST', '/other/v1/things')).body.by).toBe('express');
  });

  it('gives the error filter what the middleware passes on, throws or rejects with, and what the handler rejects with, and runs nothing after it', async () => {
    const handled: string[] = [];
    const cases: [string, RequestHandler][] = [
      ['passed on', (_req, _res, next) => next(new Error('passed on'))],
      ['thrown', () => {
        throw new Error('thrown');
      }],
      ['rejected', (async () => {
        throw new Error('rejected');
      }) as RequestHandler],
    ];
    for (const [message, failing] of cases) {
      const started = await serve({
        middleware: [failing, noting('after')],
        route: { handle: async (_req, res) => void handled.push(String(res.locals.seen)) },
      });
      server = started.server;
      // Refused before the route matched: no route template (the metrics say `unmatched`).
      expect(await started.call('POST', '/v1/things')).toEqual({ status: 500, body: { error: `Error: ${message}`, route: null } });
      expect(started.errors).toEqual([new Error(message)]);
      server.closeAllConnections();
      await new Promise((resolve) => started.server.close(resolve));
    }
    expect(handled).toEqual([]);

    const started = await serve({ route: { handle: () => Promise.reject(new Error('from the handler')) } });
    server = started.server;
    expect(await started.call('POST', '/v1/things')).toEqual({ status: 500, body: { error: 'Error: from the handler', route: '/v1/things' } });
  });

  it('answers 500 when the error filter itself fails, and keeps serving', async () => {
    const started = await serve({
      route: { handle: () => Promise.reject(new Error('first')) },
      onError: () => {
        throw new Error('the filter failed');
      },
    });
    server = started.server;
    const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}/v1/things`;
    for (let i = 0; i < 2; i++) expect((await fetch(url, { method: 'POST' })).status).toBe(500);
    expect((await started.call('GET', '/v1/things')).body.by).toBe('express');
  });

  it('refuses a server whose requests go to another listener than the Express application given', () => {
    const other = createServer();
    expect(() =>
      serveDirectRoutes(other, { app: express(), middleware: [], onError: () => undefined, basePath: '', routes: [], application: new ApplicationConfig() }),
    ).toThrow('does not hand its requests');
  });

  it('refuses to serve when Nest has an enhancer around the handler that the route does not list, naming it, and leaves the server to Express', async () => {
    const application = new ApplicationConfig();
    application.useGlobalInterceptors(new AuditInterceptor());
    const app = express();
    const refused = createServer(app);
    const route = { method: 'POST', path: '/v1/things', ...THINGS, accepts: () => true, handle: () => Promise.resolve() };
    let refusal: unknown;
    try {
      serveDirectRoutes(refused, { app, middleware: [], onError: () => undefined, basePath: '', routes: [route], application });
    } catch (error) {
      refusal = error;
    }
    expect(refused.listeners('request')).toEqual([app]);
    expect(refusal).toBeInstanceOf(DirectRouteRefused);
    expect((refusal as DirectRouteRefused).problems).toEqual([
      'the direct route of POST /v1/things does not run the global interceptor AuditInterceptor (an APP_* provider or app.useGlobal*):' +
        ' teach the route to run it and list it in its `runs` (direct-route.spec.ts), or set DIRECT_ROUTE=off',
    ]);

    const listed = await serve({ application, route: { runs: [{ kind: 'interceptor', type: AuditInterceptor, why: 'the spec says so' }] } });
    server = listed.server;
    expect((await listed.call('POST', '/v1/things')).body.by).toBe('direct');
  });

  it('refuses, once serving, a global enhancer added later (app.useGlobal*), which it could not check', async () => {
    const application = new ApplicationConfig();
    const started = await serve({ application });
    server = started.server;
    expect(() => application.useGlobalInterceptors(new AuditInterceptor())).toThrow(
      'app.useGlobalInterceptors() after the direct routes were checked: add it in createApp before serveDirectRoutes',
    );
    expect(() => application.useGlobalFilters()).toThrow('app.useGlobalFilters()');
    expect(() => application.useGlobalGuards()).toThrow('app.useGlobalGuards()');
    expect(() => application.useGlobalPipes()).toThrow('app.useGlobalPipes()');
    expect(application.getGlobalInterceptors()).toEqual([]);
  });
});

describe('ExpressPrototypesAdapter', () => {
  afterEach(() => jest.restoreAllMocks());

  /**
   * Serves a direct route and an Express route on `server`, one request each; answers whether
   * each handler's request and response had app's prototypes, and every switch of a request's
   * or response's prototype to another one.
   */
  async function switchesServing(server: Server, app: express.Express) {
    const switches: string[] = [];
    const setPrototypeOf = Object.setPrototypeOf;
    jest.spyOn(Object, 'setPrototypeOf').mockImplementation((target: object, prototype: object | null) => {
      if ((target instanceof IncomingMessage || target instanceof ServerResponse) && Object.getPrototypeOf(target) !== prototype) switches.push(target.constructor.name);
      return setPrototypeOf(target, prototype);
    });
    const seen: Array<{ by: string; prototypes: boolean }> = [];
    const record = (by: string, req: object, res: object) =>
      seen.push({ by, prototypes: Object.getPrototypeOf(req) === app.request && Object.getPrototypeOf(res) === app.response });
    app.post('/elsewhere', (req, res) => {
      record('express', req, res);
      res.json({ by: 'express', host: req.get('host') });
    });
    serveDirectRoutes(server, {
      app,
      middleware: [],
      onError: (error) => {
        throw error;
      },
      basePath: '',
      application: new ApplicationConfig(),
      routes: [
        {
          method: 'POST',
          path: '/v1/things',
          ...THINGS,
          accepts: () => true,
          handle: async (req, res) => {
            record('direct', req, res);
            res.status(201).json({ by: 'direct', host: req.get('host') });
          },
        },
      ],
    });
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    try {
      const base = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
      const host = new URL(base).host;
      const direct = await fetch(`${base}/v1/things`, { method: 'POST' });
      expect(direct.status).toBe(201);
      expect(await direct.json()).toEqual({ by: 'direct', host });
      expect(await (await fetch(`${base}/elsewhere`, { method: 'POST' })).json()).toEqual({ by: 'express', host });
      return { seen, switches };
    } finally {
      await new Promise((resolve) => server.close(resolve));
    }
  }

  it("makes a server whose requests and responses have the Express application's prototypes from the start: neither the direct route nor Express switches them", async () => {
    const adapter = new ExpressPrototypesAdapter();
    adapter.initHttpServer({});
    const app = adapter.getInstance<express.Express>();
    const { seen, switches } = await switchesServing(adapter.getHttpServer() as Server, app);
    expect(seen).toEqual([
      { by: 'direct', prototypes: true },
      { by: 'express', prototypes: true },
    ]);
    expect(switches).toEqual([]);
  });

  it('keeps req.app and res.app the application when it is mounted in another one', async () => {
    const adapter = new ExpressPrototypesAdapter();
    adapter.initHttpServer({});
    const app = adapter.getInstance<express.Express>();
    app.get('/who', (req, res) => void res.json({ request: req.app === app, response: res.app === app }));
    const parent = express();
    parent.use('/mounted', app);
    const server = createServer(parent);
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    try {
      const answer = await fetch(`http://127.0.0.1:${(server.address() as AddressInfo).port}/mounted/who`);
      expect(await answer.json()).toEqual({ request: true, response: true });
    } finally {
      await new Promise((resolve) => server.close(resolve));
    }
  });

  it('is what spares the switches: a server made without it has each request and response switched', async () => {
    const app = express();
    const { seen, switches } = await switchesServing(createServer(app), app);
    expect(seen).toEqual([
      { by: 'direct', prototypes: true },
      { by: 'express', prototypes: true },
    ]);
    expect(switches).toEqual(['IncomingMessage', 'ServerResponse', 'IncomingMessage', 'ServerResponse']);
  });
});
