import { timingSafeEqual } from 'node:crypto';
import { ApiError } from '../common/errors/api-error';
import type { AppConfig } from '../config/app-config';

/**
 * Whether a scrape may read the metrics: with METRICS_TOKEN set, only with
 * `Authorization: Bearer <token>` (compared in constant time). Without a token, only on the
 * metrics port, which the operator keeps private; on the main port /metrics is then not served.
 */
export function checkMetricsAccess(metrics: AppConfig['metrics'], authorization: string | undefined, onOwnPort: boolean): void {
  if (!metrics.token) {
    if (onOwnPort) return;
    throw new ApiError('not_found', 'Metrics are not served here: set METRICS_TOKEN, or METRICS_PORT for a port of their own.', { code: 'not_found' });
  }
  const given = Buffer.from(/^Bearer (.+)$/i.exec(authorization ?? '')?.[1] ?? '');
  const expected = Buffer.from(metrics.token);
  if (given.length !== expected.length || !timingSafeEqual(given, expected)) {
    throw new ApiError('authentication_error', 'Metrics need Authorization: Bearer <METRICS_TOKEN>.', { code: 'invalid_metrics_token' });
  }
}
