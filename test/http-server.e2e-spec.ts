import { Agent, createServer, request as httpRequest } from 'node:http';
import type { AddressInfo } from 'node:net';
import { connect } from 'node:net';
import type { Server } from 'node:http';
import { setTimeout as sleep } from 'node:timers/promises';
import { applyServerTimeouts } from '../src/app.factory';
import { startTestApp, TestApp } from './support/test-app';

/** GET through `agent`; says whether it went over a connection kept alive from an earlier request. */
function get(agent: Agent, url: string): Promise<{ status: number; reusedSocket: boolean }> {
  return new Promise((resolve, reject) => {
    const req = httpRequest(url, { agent }, (res) => {
      res.resume();
      res.on('end', () => resolve({ status: res.statusCode ?? 0, reusedSocket: req.reusedSocket }));
    });
    req.on('error', reject);
    req.end();
  });
}

async function waitFor(condition: () => boolean): Promise<void> {
  const deadline = Date.now() + 5_000;
  while (!condition()) {
    if (Date.now() > deadline) throw new Error('timed out');
    await sleep(10);
  }
}

/**
 * The HTTP server's timeouts (issue 13, item 3): a kept-alive connection outlives the idle
 * timeout of the balancers in front (Node's default of 5 s gave resets behind them), the
 * headers timeout is above it, and the request timeout bounds receiving a request only.
 */
describe('HTTP server settings', () => {
  describe('with the defaults', () => {
    let t: TestApp;
    beforeAll(async () => {
      t = await startTestApp();
    });
    afterAll(async () => {
      await t?.close();
    });

    it('applies a 65 s keep-alive, a 66 s headers timeout and a 300 s request timeout to the server', () => {
      const server = t.app.getHttpServer() as Server;
      expect(server.keepAliveTimeout).toBe(65_000);
      expect(server.headersTimeout).toBe(66_000);
      expect(server.requestTimeout).toBe(300_000);
    });

    it('keeps a connection idle for 6 s (past the 5 s Node default) usable for the next request', async () => {
      const agent = new Agent({ keepAlive: true, maxSockets: 1 });
      try {
        expect(await get(agent, `${t.baseUrl}/health`)).toEqual({ status: 200, reusedSocket: false });
        await sleep(6_000);
        expect(await get(agent, `${t.baseUrl}/health`)).toEqual({ status: 200, reusedSocket: true });
      } finally {
        agent.destroy();
      }
    }, 20_000);
  });

  describe('configured', () => {
    let t: TestApp;
    beforeAll(async () => {
      t = await startTestApp({ config: { http: { keepAliveTimeoutMs: 1_000, headersTimeoutMs: 2_000, requestTimeoutMs: 0 } } });
    });
    afterAll(async () => {
      await t?.close();
    });

    it('takes its values from the configuration, and closes a connection idle for longer than its keep-alive', async () => {
      const server = t.app.getHttpServer() as Server;
      expect([server.keepAliveTimeout, server.headersTimeout, server.requestTimeout]).toEqual([1_000, 2_000, 0]);
      // A raw connection, so that no client-side pool closes it first: the server does.
      const socket = connect(Number(new URL(t.baseUrl).port), '127.0.0.1');
      let received = '';
      socket.setEncoding('utf8').on('data', (chunk: string) => (received += chunk));
      const closed = new Promise<number>((resolve) => socket.on('close', () => resolve(Date.now())));
      socket.write('GET /health HTTP/1.1\r\nHost: localhost\r\nConnection: keep-alive\r\n\r\n');
      await waitFor(() => received.includes('{"status":"ok"}'));
      const answeredAt = Date.now();
      expect(received).toMatch(/^HTTP\/1\.1 200/);
      expect(received).toMatch(/\r\nKeep-Alive: timeout=1\r\n/i);
      const idleMs = (await closed) - answeredAt;
      expect(idleMs).toBeGreaterThanOrEqual(900);
      expect(idleMs).toBeLessThan(4_000);
    }, 20_000);
  });

  it('never cuts a response longer than the request timeout: it bounds receiving the request only', async () => {
    // Node checks the timeouts every connectionsCheckingInterval (30 s by default): 50 ms here, to see it act.
    const server = createServer({ connectionsCheckingInterval: 50 }, (_req, res) => {
      res.writeHead(200, { 'Content-Type': 'text/plain' });
      let sent = 0;
      const timer = setInterval(() => {
        res.write(`chunk${sent++} `);
        if (sent === 15) {
          clearInterval(timer);
          res.end('end');
        }
      }, 100);
    });
    applyServerTimeouts(server, { keepAliveTimeoutMs: 200, headersTimeoutMs: 300, requestTimeoutMs: 500 });
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    try {
      const started = Date.now();
      const body = await new Promise<string>((resolve, reject) => {
        httpRequest(`http://127.0.0.1:${(server.address() as AddressInfo).port}/`, (res) => {
          let text = '';
          res.setEncoding('utf8').on('data', (chunk: string) => (text += chunk));
          res.on('end', () => resolve(text));
          res.on('error', reject);
        })
          .on('error', reject)
          .end();
      });
      expect(Date.now() - started).toBeGreaterThan(1_400);
      expect(body).toMatch(/chunk14 end$/);
    } finally {
      server.closeAllConnections();
      server.close();
    }
  });
});
