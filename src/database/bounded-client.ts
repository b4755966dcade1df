import { Client, type ClientConfig } from 'pg';

export interface BoundedClientConfig extends ClientConfig {
  /** The longest a statement waits for the server's answer before the connection is dropped; 0: no bound. */
  answerTimeoutMillis?: number;
}

/**
 * Raised to every statement of a connection dropped because the server did not answer in
 * time (a stopped, frozen or unreachable PostgreSQL). Its message starts as node-postgres'
 * own "Connection terminated" errors, and it is recognised as such (database-unavailable.ts).
 */
export class DatabaseNotAnsweringError extends Error {
  override readonly name = 'DatabaseNotAnsweringError';
  constructor(timeoutMs: number) {
    super(`Connection terminated: PostgreSQL did not answer within ${timeoutMs} ms`);
  }
}

/**
 * node-postgres' client, whose statements wait at most `answerTimeoutMillis` for an answer.
 * PostgreSQL's own statement_timeout cancels a slow statement, but a server that is stopped
 * (SIGSTOP), or a host that drops packets, answers nothing, and TCP keeps the connection
 * open. pg's own `query_timeout` only fails the caller's promise and keeps the connection,
 * whose late answer (or open transaction) the pool's next user would then inherit: here the
 * connection is destroyed instead, so every statement on it fails and the pool replaces it.
 */
export class BoundedClient extends Client {
  private readonly answerTimeoutMs: number;

  constructor(config: BoundedClientConfig) {
    super(config);
    this.answerTimeoutMs = config.answerTimeoutMillis ?? 0;
  }

  // pg's `query` has a dozen overloads; this only wraps what it returns or calls back.
  override query(...args: unknown[]): never {
    const query = (super.query as (...queryArgs: unknown[]) => unknown).bind(this);
    const first = args[0] as { submit?: unknown } | undefined;
    // Submittables (cursors, streams) manage their own reads.
    if (!this.answerTimeoutMs || typeof first?.submit === 'function') return query(...args) as never;
    const timer = setTimeout(() => this.drop(), this.answerTimeoutMs);
    timer.unref();
    const last = args[args.length - 1];
    if (typeof last === 'function') {
      const callback = last as (...results: unknown[]) => void;
      return query(
        ...args.slice(0, -1),
        (...results: unknown[]) => {
          clearTimeout(timer);
          callback(...results);
        },
      ) as never;
    }
    const result = query(...args) as Promise<unknown>;
    result.then(
      () => clearTimeout(timer),
      () => clearTimeout(timer),
    );
    return result as never;
  }

  private drop(): void {
    const { connection } = this as unknown as { connection?: { stream?: { destroy(error?: Error): void } } };
    connection?.stream?.destroy(new DatabaseNotAnsweringError(this.answerTimeoutMs));
  }
}
