import { ExecutionContext, HttpCode, Post } from '@nestjs/common';
import { Reflector } from '@nestjs/core';
import { lastValueFrom, of } from 'rxjs';
import { Idempotent } from '../common/http/idempotent.decorator';
import { IdempotencyInterceptor } from './idempotency.interceptor';
import type { IdempotencyClaim, IdempotencyService } from './idempotency.service';

class Routes {
  @Post()
  @HttpCode(200)
  @Idempotent({ scope: 'things', when: (req) => (req.body as { stream?: boolean }).stream !== true })
  marked(): void {}

  @Post()
  created(): void {}

  @Post()
  @Idempotent()
  markedCreated(): void {}
}

function contextOf(handler: keyof Routes, headers: Record<string, string>, body: unknown = { a: 1 }) {
  const setHeader = jest.fn();
  const req = {
    id: 'req_1',
    method: 'POST',
    body,
    principal: { workspaceId: 'ws_1', apiKeyId: 'key_1' },
    header: (name: string) => headers[name],
  };
  const context = {
    getType: () => 'http',
    getHandler: () => Routes.prototype[handler],
    switchToHttp: () => ({ getRequest: () => req, getResponse: () => ({ setHeader }) }),
  } as unknown as ExecutionContext;
  return { context, setHeader };
}

describe('IdempotencyInterceptor', () => {
  let runs: IdempotencyClaim[];
  let replay: boolean;
  let interceptor: IdempotencyInterceptor;
  const handler = { handle: () => of({ answer: 42 }) };

  beforeEach(() => {
    runs = [];
    replay = false;
    const service = {
      run: async (claim: IdempotencyClaim, execute: () => Promise<unknown>) => {
        runs.push(claim);
        return replay ? { response: { stored: true }, replayed: true } : { response: await execute(), replayed: false };
      },
    } as unknown as IdempotencyService;
    interceptor = new IdempotencyInterceptor(new Reflector(), service);
  });

  const through = (context: ExecutionContext) => lastValueFrom(interceptor.intercept(context, handler));

  it('leaves routes without @Idempotent(), requests without a key and requests the route excludes alone', async () => {
    for (const context of [
      contextOf('created', { 'Idempotency-Key': 'k' }).context,
      contextOf('marked', {}).context,
      contextOf('marked', { 'Idempotency-Key': 'k' }, { stream: true }).context,
    ]) {
      expect(await through(context)).toEqual({ answer: 42 });
    }
    expect(runs).toEqual([]);
  });

  it("claims the key with the body, the route's scope and the status it answers with", async () => {
    const { context, setHeader } = contextOf('marked', { 'Idempotency-Key': 'k' });
    expect(await through(context)).toEqual({ answer: 42 });
    expect(runs).toEqual([{ workspaceId: 'ws_1', apiKeyId: 'key_1', requestId: 'req_1', key: 'k', body: { a: 1 }, scope: 'things', statusCode: 200 }]);
    expect(setHeader).not.toHaveBeenCalled();
    await through(contextOf('markedCreated', { 'Idempotency-Key': 'k' }).context);
    expect(runs[1]).toMatchObject({ scope: undefined, statusCode: 201 });
  });

  it('answers a replay with the stored answer and Idempotent-Replayed: true', async () => {
    replay = true;
    const { context, setHeader } = contextOf('marked', { 'Idempotency-Key': 'k' });
    expect(await through(context)).toEqual({ stored: true });
    expect(setHeader).toHaveBeenCalledWith('Idempotent-Replayed', 'true');
  });
});
