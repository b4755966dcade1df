/**
 * Preloaded into Portkey's gateway by the embeddings benchmark (bench/embeddings.ts): Portkey
 * 1.15 answers every `/v1/embeddings` with a 500 on Node.js ("TypeError: immutable"): it hands
 * the upstream's `fetch` Response on unchanged and then appends its own headers to it, which
 * Node's fetch forbids. Each Response is copied here (headers into a new, mutable Headers; the
 * body stream passed on, not read), which costs Portkey a few microseconds a request.
 */
const upstreamFetch = globalThis.fetch;
globalThis.fetch = async (...args: Parameters<typeof fetch>) => {
  const response = await upstreamFetch(...args);
  return new Response(response.body, response);
};
