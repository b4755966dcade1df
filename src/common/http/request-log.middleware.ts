import { Logger } from '@nestjs/common';
import type { NextFunction, Response } from 'express';
import { loggedPath } from './logged-path';
import type { ApiRequest } from './request-context';
import { tracing } from '../../telemetry/tracing';

/**
 * One log line per request when its response ends (or its client leaves): the request id
 * (X-Request-Id), the workspace of the API key, method, path (never the query string, and a
 * link's secret redacted: `loggedPath`), route template, status and duration. Headers are not logged, so neither
 * `Authorization` nor cookies can reach the log. In JSON (LOG_FORMAT=json) the values are
 * fields of the line; in the pretty format, one readable sentence.
 */
export function requestLogMiddleware(format: 'json' | 'pretty'): (req: ApiRequest, res: Response, next: NextFunction) => void {
  const logger = new Logger('HTTP');
  return (req: ApiRequest, res: Response, next: NextFunction) => {
    const started = process.hrtime.bigint();
    // Bound to the request's context (with OpenTelemetry on): the line carries its trace_id.
    res.once('close', tracing.bind(() => {
      const durationMs = Math.round(Number(process.hrtime.bigint() - started) / 1e5) / 10;
      const path = loggedPath(req);
      const status = res.writableFinished ? res.statusCode : 499;
      const workspaceId = req.principal?.workspaceId ?? null;
      const message = `${req.method} ${path} ${status} ${durationMs} ms`;
      const write = status >= 500 ? logger.error.bind(logger) : logger.log.bind(logger);
      if (format === 'json') {
        const route = (req.route as { path?: unknown } | undefined)?.path;
        write({
          msg: message,
          reqId: req.id,
          workspaceId,
          method: req.method,
          path,
          route: typeof route === 'string' ? `${req.baseUrl}${route}` : null,
          status,
          durationMs,
          remoteAddress: req.ip,
          userAgent: req.get('user-agent') ?? null,
        });
      } else {
        write(`${message} [${req.id}${workspaceId ? ` workspace ${workspaceId}` : ''}]`);
      }
    }));
    next();
  };
}
