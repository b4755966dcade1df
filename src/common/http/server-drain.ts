import { Injectable, Logger } from '@nestjs/common';
import type { NextFunction, Request, Response } from 'express';
import type { Server } from 'node:http';
import { Server as NetServer } from 'node:net';
import { setTimeout as sleep } from 'node:timers/promises';
import { Cancellation } from '../cancellation';
import { ApiError } from '../errors/api-error';

/** After the drain deadline, how long cut requests get to settle and end. */
const AFTER_CUT_GRACE_MS = 10_000;
const POLL_MS = 50;
/**
 * Once nothing is in flight, how long no request may have come before the kept-alive
 * connections left are closed. A balancer (HAProxy, nginx) sends a request on an idle
 * connection of its pool until its health check sees readiness fail; one closed under that
 * request is closed to its client too, who sees a connection error. Waiting until requests
 * stop coming (or each connection closed after its next answer) leaves nothing to race.
 */
export const QUIET_BEFORE_CLOSE_MS = 1_000;

/** What a stop found: requests in flight when it began, and still open at the deadline (streams then cut). */
export interface DrainOutcome {
  inFlightAtStart: number;
  openAtDeadline: number;
  /** Requests still running when the stop gave up waiting (the process closes under them). */
  abandoned: number;
}

/** The error an open request ends with when the drain deadline passes: in-band for a stream under way, else its answer (503). */
export function serverShuttingDown(): ApiError {
  return new ApiError('service_unavailable', 'The server is shutting down: the answer was ended before it finished. Send the request again.', {
    code: 'server_shutting_down',
  });
}

/**
 * A graceful stop of the HTTP server, as load balancers and orchestrators expect it (SIGTERM,
 * SIGINT or SIGHUP in main.ts): readiness turns 503 at once (HealthController), the listener closes, every
 * response from then on carries `Connection: close` (so a client's kept-alive connection is
 * closed after its next answer instead of being cut under a request), requests in flight
 * finish, idle kept-alive connections are closed once requests stop coming
 * (QUIET_BEFORE_CLOSE_MS), and streams get until the drain deadline (SHUTDOWN_DRAIN_MS). Past it, each open
 * stream is ended by `streamsCut`: its upstream call stops, what was generated is charged,
 * and the client gets an in-band `server_shutting_down` error and `[DONE]`. A request still
 * running then without a started stream (a plain one, a stream waiting for its first chunk)
 * has its upstream call stopped (`untilDeadline`) and is answered 503 `server_shutting_down`,
 * not charged.
 */
@Injectable()
export class ServerDrain {
  private readonly logger = new Logger('Shutdown');
  private stopping = false;
  private hurried = false;
  private readonly inFlight = new Set<Response>();
  private readonly cut = new Cancellation();
  private lastRequestAt = 0;

  /** True from the moment a stop begins: readiness answers 503. */
  get draining(): boolean {
    return this.stopping;
  }

  /** Aborted at the drain deadline: open streams end with `server_shutting_down` (see streamed-completion.ts). */
  get streamsCut(): Cancellation {
    return this.cut;
  }

  /**
   * The cancellation of a request's upstream calls and tools: aborted when `clientGone` is, or
   * at the drain deadline, so that a plain request, or a stream still waiting for its first
   * chunk, ends with `server_shutting_down` before the connections close instead of being cut
   * under its client. `release` when the request ends.
   */
  untilDeadline(clientGone: Cancellation): { run: Cancellation; release: () => void } {
    const { cancellation, unlink } = Cancellation.following(clientGone, this.cut);
    return { run: cancellation, release: unlink };
  }

  /** Express middleware: counts each request until its response closes; once draining, closes its connection after it. */
  readonly middleware = (_req: Request, res: Response, next: NextFunction): void => {
    if (this.stopping) res.setHeader('Connection', 'close');
    this.lastRequestAt = Date.now();
    this.inFlight.add(res);
    res.once('close', () => this.inFlight.delete(res));
    next();
  };

  /**
   * Stops `server` as described above; resolves once nothing is in flight (or the grace
   * after the deadline is over), with the remaining connections closed.
   */
  async stop(server: Server, deadlineMs: number): Promise<DrainOutcome> {
    this.begin();
    // net.Server's close, not http.Server's: the latter also drops idle kept-alive connections
    // at once, and a request a client is sending on one just then would be reset. Those
    // connections stay until their next response (Connection: close) or the end of the drain.
    if (server.listening) NetServer.prototype.close.call(server);
    const inFlightAtStart = this.inFlight.size;
    if (inFlightAtStart > 0) this.logger.log(`Waiting up to ${deadlineMs} ms for ${inFlightAtStart} request(s) in flight`);
    const deadline = Date.now() + deadlineMs;
    await this.idle(deadlineMs, () => this.hurried);
    await this.quiet(server, deadline);
    const openAtDeadline = this.inFlight.size;
    if (openAtDeadline > 0) this.logger.warn(`Drain deadline passed with ${openAtDeadline} request(s) open: streams end with server_shutting_down`);
    this.cut.abort();
    await this.idle(AFTER_CUT_GRACE_MS);
    const abandoned = this.inFlight.size;
    if (abandoned > 0) this.logger.error(`${abandoned} request(s) still running after the drain; stopping under them`);
    // What is left is idle, or abandoned: closed, so that the application's close does not wait on them.
    server.closeAllConnections();
    return { inFlightAtStart, openAtDeadline, abandoned };
  }

  /**
   * Brings the drain deadline forward to now (a stop forced by a repeated signal, main.ts):
   * open streams end at once with `server_shutting_down`, charged for what they delivered.
   */
  hurry(): void {
    this.hurried = true;
  }

  /** Readiness fails, and responses not yet started close their connections after them. */
  private begin(): void {
    this.stopping = true;
    for (const res of this.inFlight) {
      if (!res.headersSent) res.setHeader('Connection', 'close');
    }
  }

  /**
   * Until no request has come for QUIET_BEFORE_CLOSE_MS and none is in flight, while
   * connections are open (each is closed after its next answer), up to `deadline`.
   */
  private async quiet(server: Server, deadline: number): Promise<void> {
    const openConnections = () => new Promise<number>((resolve) => server.getConnections((error, count) => resolve(error ? 0 : count)));
    while (!this.hurried && Date.now() < deadline && (await openConnections()) > 0) {
      const quietFor = Date.now() - this.lastRequestAt;
      if (this.inFlight.size === 0 && quietFor >= QUIET_BEFORE_CLOSE_MS) return;
      await sleep(POLL_MS);
    }
  }

  private async idle(timeoutMs: number, over: () => boolean = () => false): Promise<void> {
    const deadline = Date.now() + timeoutMs;
    while (this.inFlight.size > 0 && Date.now() < deadline && !over()) await sleep(POLL_MS);
  }
}
