import { Injectable, Logger, OnApplicationBootstrap, OnApplicationShutdown } from '@nestjs/common';
import { createServer, type Server } from 'node:http';
import { ApiError } from '../common/errors/api-error';
import type { AppConfig } from '../config/app-config';
import { InjectConfig } from '../config/config.module';
import { checkMetricsAccess } from './metrics-access';
import { MetricsService } from './metrics.service';

/**
 * With METRICS_PORT, a small HTTP server of its own on HOST:METRICS_PORT answering only
 * `GET /metrics`: the port can stay inside the cluster while the service's port is public.
 * With METRICS_TOKEN set too, it asks for the token as well.
 */
@Injectable()
export class MetricsServer implements OnApplicationBootstrap, OnApplicationShutdown {
  private readonly logger = new Logger('Metrics');
  private server?: Server;

  constructor(
    @InjectConfig() private readonly config: AppConfig,
    private readonly metrics: MetricsService,
  ) {}

  async onApplicationBootstrap(): Promise<void> {
    const { port, token } = this.config.metrics;
    if (port === undefined) {
      if (!token) this.logger.log('Metrics are not served: set METRICS_TOKEN (GET /metrics with a bearer token) or METRICS_PORT');
      return;
    }
    const server = createServer((req, res) => {
      const path = new URL(req.url ?? '/', 'http://metrics').pathname;
      const refuse = (status: number, message: string) => res.writeHead(status, { 'Content-Type': 'text/plain; charset=utf-8' }).end(`${message}\n`);
      if (path !== '/metrics') return refuse(404, 'Not found: GET /metrics');
      if (req.method !== 'GET') return refuse(405, 'Method not allowed: GET /metrics');
      try {
        checkMetricsAccess(this.config.metrics, req.headers.authorization, true);
      } catch (error) {
        return refuse(error instanceof ApiError ? error.status : 500, error instanceof Error ? error.message : 'Refused');
      }
      this.metrics.exposition().then(
        ({ contentType, body }) => res.writeHead(200, { 'Content-Type': contentType }).end(body),
        (error: unknown) => refuse(500, `Metrics could not be collected: ${String(error)}`),
      );
    });
    await new Promise<void>((resolve, reject) => {
      server.once('error', reject);
      server.listen(port, this.config.host, () => resolve());
    });
    this.server = server;
    this.logger.log(`Metrics on http://${this.config.host}:${port}/metrics${token ? ' (bearer token required)' : ''}`);
  }

  async onApplicationShutdown(): Promise<void> {
    const server = this.server;
    if (!server) return;
    server.closeAllConnections();
    await new Promise<void>((resolve) => server.close(() => resolve()));
  }
}
