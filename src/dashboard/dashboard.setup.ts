import type { INestApplication } from '@nestjs/common';
import connectPgSimple from 'connect-pg-simple';
import { csrfSync } from 'csrf-sync';
import express, { NextFunction, Request, Response } from 'express';
import session from 'express-session';
import helmet from 'helmet';
import * as path from 'node:path';
import type { Pool } from 'pg';
import { DataSource } from 'typeorm';
import type { AppConfig } from '../config/app-config';
import { inputGuardMiddleware } from '../common/validation/input-guard';
import type { PageRequest } from './page-request';
import { sessionSecret } from '../config/session-secret';
import { formFieldsMiddleware } from './form-fields';
import { registerSecrets } from '../common/secrets';

export const SESSION_COOKIE = 'acs.sid';
const SESSION_MAX_AGE_MS = 7 * 24 * 3_600_000;

/** Paths that belong to the API and its operations, never to the dashboard's pages. */
const NON_PAGE_PREFIXES = ['/v1', '/docs', '/health', '/metrics', '/webhooks', '/widget', '/widget.js'];

export function isPagePath(pathname: string): boolean {
  return !NON_PAGE_PREFIXES.some((prefix) => pathname === prefix || pathname.startsWith(`${prefix}/`));
}

/** The synchronizer token in the session; forms send it as `_csrf`, htmx as `X-CSRF-Token`. */
export const csrf = csrfSync({
  getTokenFromRequest: (req: Request) =>
    (typeof req.body?._csrf === 'string' ? req.body._csrf : undefined) ?? (req.headers['x-csrf-token'] as string | undefined),
});

/**
 * BASE_PATH: the service may be reached under a sub-path, with the proxy in front keeping
 * the prefix or stripping it. Requests with the prefix are routed as if without it; every
 * link the pages make starts with it. Registered first of all.
 */
export function basePathMiddleware(basePath: string) {
  return (req: Request, _res: Response, next: NextFunction): void => {
    (req as PageRequest).basePath = basePath;
    if (basePath && (req.url === basePath || req.url.startsWith(`${basePath}/`) || req.url.startsWith(`${basePath}?`))) {
      req.url = req.url.slice(basePath.length) || '/';
      if (req.url.startsWith('?')) req.url = `/${req.url}`;
    }
    next();
  };
}

/** The middleware of the dashboard's pages; API paths skip all of it. */
export function useDashboard(app: INestApplication, config: AppConfig): { close(): void } {
  const basePath = config.dashboard.basePath;
  const pool = (app.get(DataSource).driver as unknown as { master: Pool }).master;
  const PgStore = connectPgSimple(session);
  const store = new PgStore({
    pool,
    tableName: 'dashboard_sessions',
    createTableIfMissing: false,
    pruneSessionInterval: 15 * 60,
    errorLog: (...args: unknown[]) => console.error('Session store:', ...args),
  });

  const pagesOnly =
    (handler: express.RequestHandler): express.RequestHandler =>
    (req, res, next) =>
      isPagePath(req.path) ? handler(req, res, next) : next();

  const security = helmet({
    contentSecurityPolicy: {
      useDefaults: false,
      directives: {
        defaultSrc: ["'self'"],
        scriptSrc: ["'self'"],
        styleSrc: ["'self'"],
        // Pico draws its icons with data: SVGs.
        imgSrc: ["'self'", 'data:'],
        fontSrc: ["'self'"],
        connectSrc: ["'self'"],
        formAction: ["'self'"],
        frameAncestors: ["'none'"],
        objectSrc: ["'none'"],
        baseUri: ["'none'"],
        ...(config.production ? { upgradeInsecureRequests: [] } : {}),
      },
    },
    // HSTS only where TLS is certain; a laptop on http must not pin itself to https.
    strictTransportSecurity: config.production,
    referrerPolicy: { policy: 'same-origin' },
  });

  const secret = sessionSecret(config);
  // A generated one is a configured secret too: never in a message or a log.
  registerSecrets([secret]);
  const sessions = session({
    name: SESSION_COOKIE,
    store,
    secret,
    resave: false,
    saveUninitialized: false,
    rolling: false,
    cookie: {
      httpOnly: true,
      sameSite: 'lax',
      secure: config.production,
      path: basePath || '/',
      maxAge: SESSION_MAX_AGE_MS,
    },
  });

  app.use(pagesOnly(security));
  app.use('/assets', assetsRouter());
  app.use(pagesOnly(express.urlencoded({ extended: false, limit: '100kb', parameterLimit: 200 })));
  // The same refusals as for JSON bodies (NUL, lone surrogates...), now that forms are parsed.
  app.use(pagesOnly(inputGuardMiddleware as express.RequestHandler));
  // A form's fields are texts, whether it came urlencoded or as JSON.
  app.use(pagesOnly(formFieldsMiddleware));
  app.use(pagesOnly(sessions));
  return { close: () => store.close() };
}

/** Every asset comes from this process (no CDN): pico, htmx and uplot from node_modules, ours beside this file. */
function assetsRouter(): express.Router {
  const router = express.Router();
  const vendor: Record<string, string> = {
    'pico.min.css': require.resolve('@picocss/pico/css/pico.min.css'),
    'htmx.min.js': require.resolve('htmx.org/dist/htmx.min.js'),
    'uplot.min.js': require.resolve('uplot/dist/uPlot.iife.min.js'),
    'uplot.min.css': require.resolve('uplot/dist/uPlot.min.css'),
  };
  for (const [name, file] of Object.entries(vendor)) {
    router.get(`/${name}`, (_req, res) => res.sendFile(file, { maxAge: '1d' }));
  }
  router.use(express.static(path.join(__dirname, 'assets'), { maxAge: '1h', index: false }));
  return router;
}
