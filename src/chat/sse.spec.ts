import { EventEmitter } from 'node:events';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import type { Response } from 'express';
import { Observable, Subject } from 'rxjs';
import { ApiError } from '../common/errors/api-error';
import { KEEP_ALIVE } from './completion-types';
import { writeEventStream } from './sse';

/** An HTTP response in memory whose socket buffer can be full: `write` answers false while `full` is set. */
class FakeResponse extends EventEmitter {
  statusCode = 0;
  headers: Record<string, string> = {};
  headersSent = false;
  writableEnded = false;
  destroyed = false;
  full = false;
  readonly written: string[] = [];
  /** What left for the socket, one entry per write to it: frames written while corked leave together. */
  readonly sent: string[] = [];
  writableCorked = 0;
  private corked: string[] = [];

  status(code: number): this {
    this.statusCode = code;
    return this;
  }
  hasHeader(name: string): boolean {
    return name.toLowerCase() in this.headers;
  }
  setHeader(name: string, value: string): void {
    this.headers[name.toLowerCase()] = value;
  }
  flushHeaders(): void {
    this.headersSent = true;
  }
  write(frame: string): boolean {
    if (this.writableEnded) throw new Error('write after end');
    this.headersSent = true;
    this.written.push(frame);
    if (this.writableCorked > 0) this.corked.push(frame);
    else this.sent.push(frame);
    return !this.full;
  }
  cork(): void {
    this.writableCorked += 1;
  }
  uncork(): void {
    this.writableCorked -= 1;
    if (this.writableCorked === 0 && this.corked.length > 0) this.sent.push(this.corked.splice(0).join(''));
  }
  end(): void {
    this.writableEnded = true;
  }
  /** The socket took what was buffered. */
  drain(): void {
    this.full = false;
    this.emit('drain');
  }
  /** The client went away. */
  disconnect(): void {
    this.destroyed = true;
    this.emit('close');
  }
}

const asResponse = (res: FakeResponse) => res as unknown as Response;
const toError = (error: unknown) => (error instanceof ApiError ? error : new ApiError('internal_error', 'The server had an error while streaming.'));
const nextTick = () => new Promise((resolve) => setImmediate(resolve));

describe('writeEventStream', () => {
  it('writes data frames, keep-alives as comments, then [DONE], with the event-stream headers first', async () => {
    const res = new FakeResponse();
    const events = new Subject<unknown>();
    const written = writeEventStream(asResponse(res), events, toError);
    expect(res.headersSent).toBe(false);
    events.next({ n: 1 });
    expect(res.statusCode).toBe(200);
    expect(res.headers['content-type']).toBe('text/event-stream; charset=utf-8');
    events.next(KEEP_ALIVE);
    events.next({ n: 2 });
    events.complete();
    await written;
    expect(res.written).toEqual(['data: {"n":1}\n\n', ': keep-alive\n\n', 'data: {"n":2}\n\n', 'data: [DONE]\n\n']);
    expect(res.writableEnded).toBe(true);
  });

  it('waits for drain before writing the next frame when the socket buffer is full', async () => {
    const res = new FakeResponse();
    const events = new Subject<unknown>();
    const written = writeEventStream(asResponse(res), events, toError);
    res.full = true;
    events.next({ n: 1 });
    events.next({ n: 2 });
    events.next({ n: 3 });
    events.complete();
    await nextTick();
    expect(res.written).toEqual(['data: {"n":1}\n\n']);
    expect(res.writableEnded).toBe(false);

    // Each drain lets exactly one more frame through while the buffer stays full.
    res.emit('drain');
    await nextTick();
    expect(res.written).toEqual(['data: {"n":1}\n\n', 'data: {"n":2}\n\n']);
    await nextTick();
    expect(res.written).toHaveLength(2);
    res.drain();
    await written;
    expect(res.written).toEqual(['data: {"n":1}\n\n', 'data: {"n":2}\n\n', 'data: {"n":3}\n\n', 'data: [DONE]\n\n']);
    expect(res.writableEnded).toBe(true);
  });

  it('sends an error after the first event in-band, then [DONE]', async () => {
    const res = new FakeResponse();
    const events = new Subject<unknown>();
    const written = writeEventStream(asResponse(res), events, toError);
    events.next({ n: 1 });
    events.error(new ApiError('upstream_error', 'The provider failed.'));
    await written;
    expect(res.written).toHaveLength(3);
    expect(JSON.parse(res.written[1].slice('data: '.length))).toMatchObject({ error: { type: 'upstream_error', message: 'The provider failed.' } });
    expect(res.written[2]).toBe('data: [DONE]\n\n');
    expect(res.writableEnded).toBe(true);
  });

  it('rejects with an error that comes before the first event, having written nothing', async () => {
    const res = new FakeResponse();
    const refused = new ApiError('insufficient_balance', 'Top up.');
    await expect(writeEventStream(asResponse(res), new Observable((subscriber) => subscriber.error(refused)), toError)).rejects.toBe(refused);
    expect(res.headersSent).toBe(false);
    expect(res.written).toEqual([]);
  });

  it('unsubscribes when the client disconnects, which ends the request', async () => {
    const res = new FakeResponse();
    let tornDown = false;
    const events = new Observable<unknown>((subscriber) => {
      subscriber.next({ n: 1 });
      return () => (tornDown = true);
    });
    const written = writeEventStream(asResponse(res), events, toError);
    expect(tornDown).toBe(false);
    res.disconnect();
    await written;
    expect(tornDown).toBe(true);
    expect(res.written).toEqual(['data: {"n":1}\n\n']);
  });

  it('stops waiting for drain when the client disconnects', async () => {
    const res = new FakeResponse();
    const events = new Subject<unknown>();
    const written = writeEventStream(asResponse(res), events, toError);
    res.full = true;
    events.next({ n: 1 });
    events.next({ n: 2 });
    res.disconnect();
    await written;
    expect(events.observed).toBe(false);
    expect(res.written).toEqual(['data: {"n":1}\n\n']);
  });

  it('sends the frames written in one turn of the event loop as one write, and later ones apart', async () => {
    const res = new FakeResponse();
    const events = new Subject<unknown>();
    const written = writeEventStream(asResponse(res), events, toError);
    events.next({ n: 1 });
    events.next({ n: 2 });
    await nextTick();
    events.next({ n: 3 });
    events.complete();
    await written;
    await nextTick();
    expect(res.sent).toEqual(['data: {"n":1}\n\ndata: {"n":2}\n\n', 'data: {"n":3}\n\ndata: [DONE]\n\n']);
  });

  it('sends a real HTTP client every frame when the last ones are written in the turn the stream ends (corked)', async () => {
    const server = createServer((_req, res) => {
      const events = new Observable<unknown>((subscriber) => {
        subscriber.next({ n: 1 });
        setTimeout(() => {
          subscriber.next({ n: 2 });
          subscriber.next({ n: 3 });
          subscriber.complete();
        }, 10);
      });
      // Express's one addition that writeEventStream uses.
      const express = Object.assign(res, { status: (code: number) => Object.assign(res, { statusCode: code }) });
      void writeEventStream(express as unknown as Response, events, (error) => error as ApiError);
    });
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    try {
      const answer = await fetch(`http://127.0.0.1:${(server.address() as AddressInfo).port}/`);
      expect(await answer.text()).toBe('data: {"n":1}\n\ndata: {"n":2}\n\ndata: {"n":3}\n\ndata: [DONE]\n\n');
    } finally {
      server.close();
    }
  });
});
