import { Cancellation } from '../../common/cancellation';
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { isAbort, toUpstreamApiError } from '../upstream-errors';
import { OpenAiHttpClient, UpstreamHttpError } from './openai-http';

/** A local server answering every request with `handle`; the request's body and headers are kept. */
async function serve(handle: (res: ServerResponse) => unknown) {
  const seen: { body: unknown; headers: IncomingMessage['headers']; url?: string }[] = [];
  const server: Server = createServer((req, res) => {
    let body = '';
    req.setEncoding('utf8').on('data', (chunk: string) => (body += chunk));
    req.on('end', () => {
      seen.push({ body: JSON.parse(body), headers: req.headers, url: req.url });
      void handle(res);
    });
  });
  let connections = 0;
  server.on('connection', () => (connections += 1));
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const client = new OpenAiHttpClient({ apiKey: 'sk-test', baseUrl: `http://127.0.0.1:${(server.address() as AddressInfo).port}/v1/` });
  return {
    client,
    seen,
    connections: () => connections,
    close: () => new Promise<void>((resolve) => {
      server.close(() => resolve());
      server.closeAllConnections();
    }),
  };
}

const chunk = (content: string) => ({ object: 'chat.completion.chunk', choices: [{ index: 0, delta: { content }, finish_reason: null }] });
const pause = () => new Promise((resolve) => setTimeout(resolve, 5));

async function collect<T>(items: AsyncIterable<T>): Promise<T[]> {
  const all: T[] = [];
  for await (const item of items) all.push(item);
  return all;
}

describe('OpenAiHttpClient', () => {
  it('posts the body with the key to {baseUrl}/chat/completions and returns the parsed answer', async () => {
    const upstream = await serve((res) => res.writeHead(200, { 'Content-Type': 'application/json' }).end(JSON.stringify({ id: 'c1', choices: [] })));
    try {
      const cancellation = new Cancellation();
      expect(await upstream.client.complete({ model: 'm', messages: [] }, cancellation)).toEqual({ id: 'c1', choices: [] });
      // The request's link to its cancellation goes with it (node:http's `signal` option did the same).
      await new Promise((resolve) => setImmediate(resolve));
      expect(cancellation.listenerCount).toBe(0);
      expect(upstream.seen[0]).toMatchObject({
        url: '/v1/chat/completions',
        body: { model: 'm', messages: [] },
        headers: { authorization: 'Bearer sk-test', 'user-agent': 'assistant-chat-service' },
      });
    } finally {
      await upstream.close();
    }
  });

  it('parses events split anywhere, with CRLF, comments and multi-line data, until [DONE]', async () => {
    const upstream = await serve(async (res) => {
      res.writeHead(200, { 'Content-Type': 'text/event-stream' });
      const wire = `: keep-alive\n\ndata: ${JSON.stringify(chunk('Hel'))}\r\n\r\ndata: {"object": "chat.completion.chunk",\ndata: "choices": [{"index": 0, "delta": {"content": "lo"}, "finish_reason": null}]}\n\ndata: [DONE]\n\ndata: ${JSON.stringify(chunk('after'))}\n\n`;
      // One byte at a time for the first 40, so that events and lines arrive cut.
      for (let i = 0; i < 40; i++) {
        res.write(wire[i]);
        await pause();
      }
      res.end(wire.slice(40));
    });
    try {
      const cancellation = new Cancellation();
      const chunks = await collect(upstream.client.stream({ stream: true }, cancellation));
      expect(chunks.map((c) => c.choices[0].delta.content)).toEqual(['Hel', 'lo']);
      await new Promise((resolve) => setTimeout(resolve, 20));
      expect(cancellation.listenerCount).toBe(0);
    } finally {
      await upstream.close();
    }
  });

  it('keeps the connection of a stream that ended with [DONE], whether the body ends with it or just after', async () => {
    let call = 0;
    const upstream = await serve(async (res) => {
      res.writeHead(200, { 'Content-Type': 'text/event-stream' });
      res.write(`data: ${JSON.stringify(chunk('x'))}\n\ndata: [DONE]\n\n`);
      if (call++ % 2 === 1) await pause();
      res.end();
    });
    try {
      for (let i = 0; i < 4; i++) {
        expect(await collect(upstream.client.stream({}, new Cancellation()))).toHaveLength(1);
        // The stream is over at [DONE]; the body's end, read after it, frees the socket a moment later.
        await new Promise((resolve) => setTimeout(resolve, 30));
      }
      expect(upstream.connections()).toBe(1);
    } finally {
      await upstream.close();
    }
  });

  it('gives up on a body that never ends after [DONE]: its connection is closed within a second, not kept', async () => {
    let closed: Promise<number>;
    const upstream = await serve((res) => {
      const since = Date.now();
      closed = new Promise((resolve) => res.socket!.once('close', () => resolve(Date.now() - since)));
      res.writeHead(200, { 'Content-Type': 'text/event-stream' });
      res.write(`data: ${JSON.stringify(chunk('x'))}\n\ndata: [DONE]\n\n`);
    });
    try {
      expect(await collect(upstream.client.stream({}, new Cancellation()))).toHaveLength(1);
      const closedAfterMs = await closed!;
      expect(closedAfterMs).toBeGreaterThanOrEqual(900);
      expect(closedAfterMs).toBeLessThan(3_000);
    } finally {
      await upstream.close();
    }
  });

  it('ends a stream that closes without [DONE], as the OpenAI SDK does', async () => {
    const upstream = await serve((res) => res.writeHead(200, { 'Content-Type': 'text/event-stream' }).end(`data: ${JSON.stringify(chunk('only'))}\n\n`));
    try {
      expect(await collect(upstream.client.stream({}, new Cancellation()))).toHaveLength(1);
    } finally {
      await upstream.close();
    }
  });

  it('reports an error status with its headers and error body, as toUpstreamApiError reads them', async () => {
    const upstream = await serve((res) =>
      res.writeHead(429, { 'Content-Type': 'application/json', 'Retry-After': '7' }).end(JSON.stringify({ error: { message: 'slow down', type: 'rate_limit' } })),
    );
    try {
      const error = await upstream.client.complete({}, new Cancellation()).catch((caught: unknown) => caught);
      expect(error).toBeInstanceOf(UpstreamHttpError);
      expect(error).toMatchObject({ status: 429, error: { message: 'slow down' } });
      expect(toUpstreamApiError(error, 'openai')).toMatchObject({ code: 'upstream_rate_limited', headers: { 'Retry-After': '7' } });
    } finally {
      await upstream.close();
    }
  });

  it('keeps the text of an error body that is a bare string', async () => {
    const upstream = await serve((res) => res.writeHead(400, { 'Content-Type': 'application/json' }).end(JSON.stringify({ error: 'model "x" not found' })));
    try {
      const error = await upstream.client.complete({}, new Cancellation()).catch((caught: unknown) => caught);
      expect(toUpstreamApiError(error, 'openai')).toMatchObject({ code: 'upstream_bad_request', message: expect.stringContaining('model "x" not found') });
    } finally {
      await upstream.close();
    }
  });

  it('keeps the text of an error body that is not JSON (a page from a proxy, say)', async () => {
    const upstream = await serve((res) => res.writeHead(502, { 'Content-Type': 'text/html' }).end('<h1>Bad gateway</h1>'));
    try {
      const error = await upstream.client.complete({}, new Cancellation()).catch((caught: unknown) => caught);
      expect(error).toMatchObject({ status: 502, error: { message: '<h1>Bad gateway</h1>' } });
      expect(toUpstreamApiError(error, 'openai')).toMatchObject({ code: 'upstream_failed' });
    } finally {
      await upstream.close();
    }
  });

  it('fails a stream on an in-band error event (data or event: error), and mid-answer when the connection breaks', async () => {
    const failing = await serve((res) => res.writeHead(200).end(`data: ${JSON.stringify(chunk('a'))}\n\ndata: {"error": {"message": "model crashed"}}\n\n`));
    const named = await serve((res) => res.writeHead(200).end(`data: ${JSON.stringify(chunk('a'))}\n\nevent: error\ndata: {"message": "overloaded"}\n\n`));
    const cut = await serve(async (res) => {
      res.writeHead(200).write(`data: ${JSON.stringify(chunk('a'))}\n\n`);
      await pause();
      res.destroy();
    });
    try {
      const inBand = await collect(failing.client.stream({}, new Cancellation())).catch((caught: unknown) => caught);
      expect(toUpstreamApiError(inBand, 'openai')).toMatchObject({ code: 'upstream_failed', message: expect.stringContaining('model crashed') });
      const namedError = await collect(named.client.stream({}, new Cancellation())).catch((caught: unknown) => caught);
      expect(toUpstreamApiError(namedError, 'openai')).toMatchObject({ code: 'upstream_failed', message: expect.stringContaining('overloaded') });
      const broken = await collect(cut.client.stream({}, new Cancellation())).catch((caught: unknown) => caught);
      expect(isAbort(broken)).toBe(false);
      expect(toUpstreamApiError(broken, 'openai')).toMatchObject({ code: 'upstream_unreachable' });
    } finally {
      await Promise.all([failing.close(), named.close(), cut.close()]);
    }
  });

  it('stops on abort, before the answer and in the middle of a stream, with an AbortError', async () => {
    const upstream = await serve((res) => {
      res.writeHead(200).write(`data: ${JSON.stringify(chunk('a'))}\n\n`);
    });
    try {
      const before = new Cancellation();
      const waiting = upstream.client.complete({}, before).catch((caught: unknown) => caught);
      before.abort();
      expect(isAbort(await waiting)).toBe(true);
      // A plain answer under way (its headers came, its body never ends).
      const reading = new Cancellation();
      const read = upstream.client.complete({}, reading).catch((caught: unknown) => caught);
      await new Promise((resolve) => setTimeout(resolve, 50));
      reading.abort();
      expect(isAbort(await read)).toBe(true);

      const during = new Cancellation();
      const chunks = upstream.client.stream({}, during)[Symbol.asyncIterator]();
      expect((await chunks.next()).value).toEqual(chunk('a'));
      const next = chunks.next().catch((caught: unknown) => caught);
      during.abort();
      expect(isAbort(await next)).toBe(true);
    } finally {
      await upstream.close();
    }
  });

  it('survives an abort after its reader returned from a stream that had arrived whole (no uncaught socket error)', async () => {
    const upstream = await serve((res) => {
      res.writeHead(200, { 'Content-Type': 'text/event-stream' });
      res.end(`data: ${JSON.stringify(chunk('a'))}\n\ndata: ${JSON.stringify(chunk('b'))}\n\ndata: [DONE]\n\n`);
    });
    const uncaught: unknown[] = [];
    const note = (error: unknown) => uncaught.push(error);
    process.on('uncaughtException', note);
    try {
      const closing = new Cancellation();
      const chunks = upstream.client.stream({}, closing)[Symbol.asyncIterator]();
      expect((await chunks.next()).value).toEqual(chunk('a'));
      // As ProvidersService closes a stream its client left: abort, then return.
      closing.abort();
      await chunks.return?.();
      await new Promise((resolve) => setTimeout(resolve, 50));
      expect(uncaught).toEqual([]);
    } finally {
      process.off('uncaughtException', note);
      await upstream.close();
    }
  });
});
