import { CanActivate, DynamicModule, LoggerService, NestApplicationOptions } from '@nestjs/common';
import { ApplicationConfig, NestFactory } from '@nestjs/core';
import { type ExpressAdapter, NestExpressApplication } from '@nestjs/platform-express';
import { DocumentBuilder, SwaggerModule } from '@nestjs/swagger';
import express, { type NextFunction, type RequestHandler, type Response } from 'express';
import type { IncomingMessage, Server, ServerResponse } from 'node:http';
import { API_GUARDS, AppModule } from './app.module';
import { chatCompletionsRoute } from './chat/chat-direct-route';
import { embeddingsRoute } from './embeddings/embeddings-direct-route';
import { EmbeddingsRefusalFilter } from './embeddings/embeddings-refusal.filter';
import { EmbeddingsController } from './embeddings/embeddings.controller';
import { messagesRoute } from './messages/messages-direct-route';
import { MessagesController } from './messages/messages.controller';
import { MessagesErrorFilter } from './messages/messages-error.filter';
import { ChatRefusalFilter } from './chat/chat-refusal.filter';
import { ChatController } from './chat/chat.controller';
import { ChatService } from './chat/chat.service';
import { DirectRouteRefused, ExpressPrototypesAdapter, serveDirectRoutes } from './common/http/direct-route';
import { answerErrorInAnthropicShape } from './common/errors/anthropic-errors';
import { ApiExceptionFilter } from './common/errors/api-exception.filter';
import { answerContinueOnlyWhenRead } from './common/http/expect-continue';
import { ERROR_PAGE_RENDERER, ErrorPageRenderer } from './common/errors/error-pages';
import { API_RESPONSE_HEADERS } from './common/openapi/api-responses';
import type { ApiRequest } from './common/http/request-context';
import { jsonBodyOnlyMiddleware } from './common/http/json-body.middleware';
import { requestIdMiddleware } from './common/http/request-id.middleware';
import { requestLogMiddleware } from './common/http/request-log.middleware';
import { appLogger } from './common/logging/pino-logger';
import { ServerDrain } from './common/http/server-drain';
import { inputGuardMiddleware } from './common/validation/input-guard';
import { createValidationPipe } from './common/validation/validation.pipe';
import { type AppConfig, ConfigError, configuredSecrets } from './config/app-config';
import { registerSecrets } from './common/secrets';
import { basePathMiddleware, useDashboard } from './dashboard/dashboard.setup';
import { httpMetricsMiddleware } from './metrics/http-metrics.middleware';
import { MetricsService } from './metrics/metrics.service';
import { tracing } from './telemetry/tracing';

/**
 * Makes the Nest application from the root module: NestFactory.create, unless a test
 * builds it through @nestjs/testing to override a provider (test/support/test-app.ts).
 */
export type AppCreator = (module: DynamicModule, options: NestApplicationOptions, adapter: ExpressAdapter) => Promise<NestExpressApplication>;

export { logLevelsFor } from './common/logging/pino-logger';

/**
 * Builds the HTTP application exactly as it runs in production. main.ts, the tests and
 * the benchmarks all go through here, so none of them runs a differently wired app.
 */
export async function createApp(
  config: AppConfig,
  databaseUrl: string,
  /** `logger`: false for none (tests), or the one main.ts made; by default LOG_FORMAT's (appLogger). */
  options: { logger?: false | LoggerService; create?: AppCreator } = {},
): Promise<NestExpressApplication> {
  // Before anything can log or answer: the configuration's secrets are masked in both.
  registerSecrets(configuredSecrets(config));
  const create: AppCreator = options.create ?? ((module, appOptions, adapter) => NestFactory.create<NestExpressApplication>(module, adapter, appOptions));
  const app = await create(
    AppModule.register({ config, databaseUrl }),
    {
      // Parsed by our own list of middleware (below), which the direct route shares.
      bodyParser: false,
      logger: options.logger ?? appLogger(config),
    },
    new ExpressPrototypesAdapter(),
  );
  app.disable('x-powered-by');
  applyServerTimeouts(app.getHttpServer(), config.http);
  answerContinueOnlyWhenRead(app.getHttpServer());
  // Behind a load balancer the client address (per-address rate limits) is in X-Forwarded-For,
  // to be believed only from the proxies named in TRUST_PROXY.
  app.set('trust proxy', config.trustProxy);
  // What every request goes through before its route, in this order; the direct route of chat completions too.
  const requestMiddleware: RequestHandler[] = [
    // First: every request is counted until its response closes, so that a stop waits for it.
    app.get(ServerDrain).middleware,
    httpMetricsMiddleware(app.get(MetricsService)),
    basePathMiddleware(config.dashboard.basePath),
    requestIdMiddleware as RequestHandler,
    // With OpenTelemetry on: the server span of a /v1 request, current for everything after it (the request log's line too).
    ...serverSpanMiddleware(),
    // A line per request, unless LOG_LEVEL is above `log` or logging is off: then not even the listener is added.
    ...(options.logger !== false && ['log', 'debug', 'verbose'].includes(config.logLevel) ? [requestLogMiddleware(config.logFormat) as RequestHandler] : []),
    jsonBodyOnlyMiddleware as RequestHandler,
    // JSON bodies also keep their exact bytes (req.rawBody): Stripe signs its webhook events over them.
    express.json({ limit: config.bodyLimit, verify: keepRawBody }),
    // Before anything walks the body recursively (class-transformer) or stores it (PostgreSQL).
    inputGuardMiddleware as RequestHandler,
    // With OpenTelemetry on: the body parser called this from the socket's events, outside the request's span.
    ...reenterSpanMiddleware(),
  ];
  for (const middleware of requestMiddleware) app.use(middleware);
  const dashboard = useDashboard(app, config);
  app.getHttpServer().once('close', () => dashboard.close());
  // Errors of the body parser (malformed JSON, body too large) and of the checks around it
  // happen before Nest's routing, so they are answered here, by the same filter as every other error;
  // on Anthropic's Messages API in its shape, as the route's own errors (messages-error.filter.ts).
  const filter = new ApiExceptionFilter(app.get<ErrorPageRenderer>(ERROR_PAGE_RENDERER));
  app.use((error: unknown, req: ApiRequest, res: Response, next: NextFunction) => {
    if (!error) return next();
    if (isMessagesPath(req.path)) answerErrorInAnthropicShape(req, res);
    filter.respond(error, req, res);
  });
  app.useGlobalPipes(createValidationPipe());
  setUpSwagger(app);
  // Chat completions (and messages, embeddings) skip Express's router and Nest's pipeline, a fifth to a quarter of their CPU (README, "The direct route"),
  // unless DIRECT_ROUTE=off. Last: it refuses to start if Nest would run around the handler anything it does not, and
  // the global enhancers are all known only once the ones above are added. app.useGlobal* on the app returned here
  // throws (serveDirectRoutes): add them above.
  if (config.directRoute === 'on') {
    try {
      serveDirectRoutes(app.getHttpServer(), {
        app: app.getHttpAdapter().getInstance(),
        middleware: requestMiddleware,
        // The body parser's refusals of a message request answer in Anthropic's shape, as the Express error handler above does.
        onError: (error, req, res) => {
          if (isMessagesPath(req.path)) answerErrorInAnthropicShape(req, res);
          filter.respond(error, req, res);
        },
        basePath: config.dashboard.basePath,
        routes: [
          chatCompletionsRoute(
            app.get(ChatController),
            API_GUARDS.map((guard) => app.get<CanActivate>(guard)),
            new ChatRefusalFilter(app.get(ChatService)),
          ),
          messagesRoute(
            app.get(MessagesController),
            API_GUARDS.map((guard) => app.get<CanActivate>(guard)),
            app.get(MessagesErrorFilter),
          ),
          embeddingsRoute(
            app.get(EmbeddingsController),
            API_GUARDS.map((guard) => app.get<CanActivate>(guard)),
            app.get(EmbeddingsRefusalFilter),
          ),
        ],
        application: app.get(ApplicationConfig),
      });
    } catch (error) {
      await app.close();
      // Told as a configuration error (the operator's way out is DIRECT_ROUTE=off): its message, without a stack.
      throw error instanceof DirectRouteRefused ? new ConfigError(error.problems) : error;
    }
  }
  return app;
}

function serverSpanMiddleware(): RequestHandler[] {
  const middleware = tracing.serverMiddleware();
  return middleware ? [middleware as unknown as RequestHandler] : [];
}

function reenterSpanMiddleware(): RequestHandler[] {
  const middleware = tracing.reenterMiddleware();
  return middleware ? [middleware as unknown as RequestHandler] : [];
}

/** The parser's `verify`: keeps the bytes of a JSON body (as Nest's `rawBody: true` does). */
function keepRawBody(req: IncomingMessage, _res: ServerResponse, body: Buffer): void {
  (req as IncomingMessage & { rawBody?: Buffer }).rawBody = body;
}

/**
 * Node's defaults drop a kept-alive connection after 5 s idle; a load balancer that keeps
 * its side open longer (60 s is common) then sends a request on a socket being closed, and
 * the client gets a reset. Ours outlives theirs (HTTP_KEEP_ALIVE_TIMEOUT_MS, 65 s). The
 * request timeout bounds receiving a request (headers and body), never the response, so a
 * long stream is not cut by it.
 */
export function applyServerTimeouts(server: Server, http: AppConfig['http']): void {
  server.keepAliveTimeout = http.keepAliveTimeoutMs;
  server.headersTimeout = http.headersTimeoutMs;
  server.requestTimeout = http.requestTimeoutMs;
}

function setUpSwagger(app: NestExpressApplication): void {
  const document = SwaggerModule.createDocument(
    app,
    new DocumentBuilder()
      .setTitle('Assistant Chat Service')
      .setDescription(
        'OpenAI-compatible chat gateway. Point any OpenAI SDK at `{base_url}/v1` with an API key. ' +
          'Every `/v1` response carries `X-Request-Id` and the `X-RateLimit-*` headers; every error has the body ' +
          '`{"error": {"type", "message", "code", "param"}}`. Amounts are in millicents (1/1000 of a cent).',
      )
      .setVersion('1')
      .addBearerAuth({ type: 'http', scheme: 'bearer', description: 'An API key: `sk-...`' })
      // The order people look for things in: the API first, operations last.
      .addTag('Chat', 'OpenAI chat completions, plain and streamed, in direct or assistant mode')
      .addTag('Models', 'The curated model list')
      .addTag('Conversations', 'Stored chats, full-text search and statistics')
      .addTag('Usage', 'Usage records and statistics')
      .addTag(
        'Wallet',
        'Balance, reservations and the ledger, in millicents. The wallet is charged whole millicents and carries the fraction of a ' +
          "cost to the next request: a request that cost 259.6 millicents (its usage record's exact cost, $0.0026) takes 259 from the " +
          'balance ($0.00259 in the ledger), and its 0.6 millicent is charged with the next one, so charges never drift from costs by a millicent or more.',
      )
      .addTag('Limits', 'Tiers and rate limits')
      .addTag('Health', 'Liveness and readiness probes, without a key')
      .build(),
  );
  document.components = { ...document.components, headers: API_RESPONSE_HEADERS };
  SwaggerModule.setup('docs', app, document, {
    jsonDocumentUrl: 'docs/openapi.json',
    yamlDocumentUrl: 'docs/openapi.yaml',
    // deepLinking: the dashboard links to a tag (`/docs#/Wallet`).
    swaggerOptions: { persistAuthorization: true, deepLinking: true },
  });
}

/** The Anthropic Messages API's paths, whose errors answer in Anthropic's shape. */
function isMessagesPath(path: string): boolean {
  return path === '/v1/messages' || path.startsWith('/v1/messages/');
}
