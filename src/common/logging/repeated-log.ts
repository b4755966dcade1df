/** How often a repeated operational error is written again, with its count. */
export const REPEATED_LOG_INTERVAL_MS = 10_000;

interface Repeats {
  /** Occurrences since the last line written. */
  count: number;
  /** The newest occurrence's message, written with the count. */
  message: string;
  timer: NodeJS.Timeout;
}

/**
 * Writes repeated identical operational errors (a full journal disk, a database that cannot
 * be reached, leases that cannot be extended) once per interval with a count, instead of one
 * line per request: the first occurrence of a kind at once, then, at the end of each interval
 * in which it happened again, the newest message with "(x 1,500 in the last 10 s)". A kind
 * quiet for a whole interval is forgotten: its next occurrence is written at once again.
 * What makes two errors "identical" is the caller's `kind` (an operation and an error code,
 * not a request id).
 */
export class RepeatedLog {
  private readonly repeats = new Map<string, Repeats>();

  constructor(
    private readonly write: (message: string) => void,
    private readonly intervalMs = REPEATED_LOG_INTERVAL_MS,
  ) {}

  report(kind: string, message: string): void {
    const repeats = this.repeats.get(kind);
    if (repeats) {
      repeats.count++;
      repeats.message = message;
      return;
    }
    this.write(message);
    this.startInterval(kind, message);
  }

  /** Writes the counts not written yet (a process stopping), and forgets every kind. */
  flush(): void {
    for (const [kind, repeats] of this.repeats) {
      clearTimeout(repeats.timer);
      if (repeats.count > 0) this.write(withCount(repeats, this.intervalMs));
      this.repeats.delete(kind);
    }
  }

  private startInterval(kind: string, message: string): void {
    const timer = setTimeout(() => {
      const repeats = this.repeats.get(kind)!;
      this.repeats.delete(kind);
      if (repeats.count === 0) return;
      this.write(withCount(repeats, this.intervalMs));
      // Still happening: the next interval counts again.
      this.startInterval(kind, repeats.message);
    }, this.intervalMs);
    // A pending count never keeps the process alive.
    timer.unref();
    this.repeats.set(kind, { count: 0, message, timer });
  }
}

function withCount({ count, message }: Repeats, intervalMs: number): string {
  return `${message} (x ${count.toLocaleString('en-US')} in the last ${Math.round(intervalMs / 1000)} s)`;
}

/**
 * The kind of an error for RepeatedLog: its code (SQLSTATE, errno) or, without one, its
 * message with digits masked, so that ids and numbers in it do not make every line new.
 */
export function errorKind(error: unknown): string {
  const seen = new Set<unknown>();
  let current: unknown = error;
  while (typeof current === 'object' && current !== null && !seen.has(current)) {
    seen.add(current);
    const { code, driverError } = current as { code?: unknown; driverError?: unknown };
    if (typeof code === 'string' || typeof code === 'number') return String(code);
    current = driverError;
  }
  const message = error instanceof Error ? `${error.name}: ${error.message}` : String(error);
  return message.replace(/[0-9a-f]{8}-[0-9a-f-]{27}/gi, '<id>').replace(/\d+/g, '<n>').slice(0, 200);
}
