import type { Request, Response } from 'express';
import { Agent, createServer, get, type IncomingMessage, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { Cancellation } from '../cancellation';
import { QUIET_BEFORE_CLOSE_MS, ServerDrain } from './server-drain';

/** A plain Node server behind the drain's middleware; `handle` answers each request. */
async function serve(drain: ServerDrain, handle: (res: Response) => void): Promise<{ server: Server; url: string }> {
  const server = createServer((req, res) => drain.middleware(req as Request, res as unknown as Response, () => handle(res as unknown as Response)));
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return { server, url: `http://127.0.0.1:${(server.address() as AddressInfo).port}/` };
}

function request(url: string, agent?: Agent): Promise<{ res: IncomingMessage; body: string }> {
  return new Promise((resolve, reject) => {
    get(url, { agent }, (res) => {
      let body = '';
      res.setEncoding('utf8').on('data', (chunk: string) => (body += chunk));
      res.on('end', () => resolve({ res, body }));
    }).on('error', reject);
  });
}

const waitFor = async (condition: () => boolean) => {
  for (let i = 0; i < 200 && !condition(); i++) await new Promise((resolve) => setTimeout(resolve, 5));
};

describe('ServerDrain', () => {
  it('lets a request in flight finish, closing its connection after it, and stops listening', async () => {
    const drain = new ServerDrain();
    let started = false;
    const { server, url } = await serve(drain, (res) => {
      started = true;
      setTimeout(() => res.end('done'), 300);
    });
    const answer = request(url);
    await waitFor(() => started);
    const outcome = await drain.stop(server, 5_000);
    expect(drain.draining).toBe(true);
    expect(outcome).toEqual({ inFlightAtStart: 1, openAtDeadline: 0, abandoned: 0 });
    const { res, body } = await answer;
    expect(body).toBe('done');
    expect(res.headers.connection).toBe('close');
    expect(server.listening).toBe(false);
    expect(drain.streamsCut.aborted).toBe(true);
  });

  it('keeps an idle kept-alive connection open while requests still come, so a balancer reusing it is answered, not reset', async () => {
    const drain = new ServerDrain();
    const { server, url } = await serve(drain, (res) => res.end('ok'));
    const agent = new Agent({ keepAlive: true, maxSockets: 1 });
    const first = await request(url, agent);
    expect(first.res.headers.connection).toBe('keep-alive');
    const before = Date.now();
    const stopped = drain.stop(server, 5_000);
    // A balancer that has not seen readiness fail yet sends its next request on the idle connection.
    await new Promise((resolve) => setTimeout(resolve, 300));
    const second = await request(url, agent);
    expect(second.body).toBe('ok');
    expect(second.res.headers.connection).toBe('close');
    expect(await stopped).toEqual({ inFlightAtStart: 0, openAtDeadline: 0, abandoned: 0 });
    // Closed once the second answer closed the last connection, well before the deadline.
    expect(Date.now() - before).toBeLessThan(2_000);
    agent.destroy();
  });

  it('closes an idle kept-alive connection once no request came for QUIET_BEFORE_CLOSE_MS', async () => {
    const drain = new ServerDrain();
    const { server, url } = await serve(drain, (res) => res.end('ok'));
    const agent = new Agent({ keepAlive: true, maxSockets: 1 });
    await request(url, agent);
    const before = Date.now();
    await drain.stop(server, 5_000);
    const took = Date.now() - before;
    expect(took).toBeGreaterThanOrEqual(QUIET_BEFORE_CLOSE_MS - 100);
    expect(took).toBeLessThan(QUIET_BEFORE_CLOSE_MS + 1_000);
    agent.destroy();
  });

  it('cuts what is still open at the deadline through streamsCut', async () => {
    const drain = new ServerDrain();
    let started = false;
    const { server, url } = await serve(drain, (res) => {
      started = true;
      res.write('first ');
      drain.streamsCut.onAbort(() => res.end('cut'));
    });
    const answer = request(url);
    await waitFor(() => started);
    const before = Date.now();
    const outcome = await drain.stop(server, 200);
    expect(Date.now() - before).toBeGreaterThanOrEqual(190);
    expect(outcome).toEqual({ inFlightAtStart: 1, openAtDeadline: 1, abandoned: 0 });
    expect((await answer).body).toBe('first cut');
  });

  it('brings the deadline forward when hurried (a forced stop): open streams are cut at once', async () => {
    const drain = new ServerDrain();
    let started = false;
    const { server, url } = await serve(drain, (res) => {
      started = true;
      res.write('first ');
      drain.streamsCut.onAbort(() => res.end('cut'));
    });
    const answer = request(url);
    await waitFor(() => started);
    const stopped = drain.stop(server, 600_000);
    await new Promise((resolve) => setTimeout(resolve, 100));
    expect(drain.streamsCut.aborted).toBe(false);
    drain.hurry();
    // Well before the 10-minute deadline (the test's own timeout is 5 s).
    expect(await stopped).toEqual({ inFlightAtStart: 1, openAtDeadline: 1, abandoned: 0 });
    expect((await answer).body).toBe('first cut');
  });

  it('links a request to the deadline: its run aborts with the client or at the deadline, and a released one is left alone', async () => {
    const drain = new ServerDrain();
    const clientLeft = new Cancellation();
    const leaving = drain.untilDeadline(clientLeft);
    const released = drain.untilDeadline(new Cancellation());
    const running = drain.untilDeadline(new Cancellation());
    released.release();
    clientLeft.abort();
    expect([leaving.run.aborted, released.run.aborted, running.run.aborted]).toEqual([true, false, false]);
    // Only the running request still listens to the deadline.
    expect(drain.streamsCut.listenerCount).toBe(2);
    leaving.release();
    expect(drain.streamsCut.listenerCount).toBe(1);

    const { server } = await serve(drain, (res) => res.end());
    await drain.stop(server, 10);
    expect([released.run.aborted, running.run.aborted]).toEqual([false, true]);
    // After the deadline, a new link is aborted from the start.
    expect(drain.untilDeadline(new Cancellation()).run.aborted).toBe(true);
  });
});
