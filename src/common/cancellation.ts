/**
 * What stops a request's work: the client leaving, the stop's drain deadline, the end of a
 * stream. An AbortController's part without its AbortSignal, for the per-request links inside
 * this service: on Node 20 every AbortSignal is made with a hidden class of its own
 * (`createAbortSignal` sets an EventTarget's prototype, then adds fields), which lives in the
 * old generation until a full collection. The three or four signals a request made were more
 * than half of what its young collections promoted (bench/README.md, "Results: one signal per
 * upstream call"). This is a plain object of one shape; `signal` makes a real AbortSignal on
 * first use, for the code that needs one (provider SDKs, tools, timers).
 */
export class Cancellation {
  private abortedWith: { reason: unknown } | undefined;
  private listeners: Set<(reason: unknown) => void> | undefined;
  private controller: AbortController | undefined;

  get aborted(): boolean {
    return this.abortedWith !== undefined;
  }

  /** Why it was aborted: what `abort` was given, else an AbortError (made when first asked for); undefined until then. */
  get reason(): unknown {
    if (!this.abortedWith) return undefined;
    this.abortedWith.reason ??= new DOMException('This operation was aborted', 'AbortError');
    return this.abortedWith.reason;
  }

  /**
   * Aborts once (later calls do nothing) and calls the listeners in the order they were added.
   * A listener that throws does not stop the others: its error is thrown on the next tick, as
   * an AbortSignal's listener's would be.
   */
  abort(reason?: unknown): void {
    if (this.abortedWith) return;
    this.abortedWith = { reason };
    this.controller?.abort(this.reason);
    const listeners = this.listeners;
    this.listeners = undefined;
    if (!listeners) return;
    for (const listener of listeners) {
      try {
        listener(reason);
      } catch (error) {
        process.nextTick(() => {
          throw error;
        });
      }
    }
  }

  /**
   * Calls `listener` once, when aborted; at once when it is already. Answers the function that
   * removes it, for a request that ends first: a long-lived cancellation (the stop's) would
   * otherwise keep every request's listener.
   */
  onAbort(listener: (reason: unknown) => void): () => void {
    if (this.abortedWith) {
      listener(this.abortedWith.reason);
      return noop;
    }
    (this.listeners ??= new Set()).add(listener);
    return () => this.listeners?.delete(listener);
  }

  /** How many listeners wait for it (the links a finished request must not leave behind); its `signal`'s are its own. */
  get listenerCount(): number {
    return this.listeners?.size ?? 0;
  }

  /** A cancellation aborted with the first of `sources` to abort (with its reason), until `unlink`. */
  static following(...sources: Cancellation[]): { cancellation: Cancellation; unlink: () => void } {
    const cancellation = new Cancellation();
    const follow = (reason: unknown) => cancellation.abort(reason);
    const removers = sources.map((source) => source.onAbort(follow));
    return { cancellation, unlink: () => removers.forEach((remove) => remove()) };
  }

  /** An AbortSignal that aborts with this, made on first use (for code outside this service, and Node's own APIs). */
  get signal(): AbortSignal {
    if (!this.controller) {
      this.controller = new AbortController();
      if (this.abortedWith) this.controller.abort(this.reason);
    }
    return this.controller.signal;
  }
}

function noop(): void {}
