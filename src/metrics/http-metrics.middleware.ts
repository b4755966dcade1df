import type { NextFunction, Request, RequestHandler, Response } from 'express';
import type { MetricsService } from './metrics.service';

/**
 * Counts every request and observes its duration when its response ends (or its client
 * leaves), labelled by method, status and the route template that matched
 * (`/v1/conversations/:id`), never the raw URL: ids in paths would make a series per
 * request. Requests no route matched (static files, early refusals) are `unmatched`.
 */
export function httpMetricsMiddleware(metrics: MetricsService): RequestHandler {
  return (req: Request, res: Response, next: NextFunction) => {
    const started = process.hrtime.bigint();
    res.once('close', () => {
      const route = (req.route as { path?: unknown } | undefined)?.path;
      const labels = {
        method: req.method,
        route: typeof route === 'string' ? `${req.baseUrl}${route}` : 'unmatched',
        status: String(res.statusCode),
      };
      metrics.httpRequests.inc(labels);
      metrics.httpDuration.observe(labels, Number(process.hrtime.bigint() - started) / 1e9);
    });
    next();
  };
}
