/**
 * Polls `condition` every 25 ms until it holds. The bound is not a claim about speed: it only
 * turns a condition that never comes true into a failure instead of a hang (15 s: a busy
 * 2-core machine in the full suite is slow, not that slow).
 */
export async function waitFor(condition: () => Promise<boolean> | boolean, timeoutMs = 15_000): Promise<void> {
  const started = Date.now();
  while (!(await condition())) {
    if (Date.now() - started > timeoutMs) throw new Error(`condition not met in ${timeoutMs} ms`);
    await new Promise((resolve) => setTimeout(resolve, 25));
  }
}
