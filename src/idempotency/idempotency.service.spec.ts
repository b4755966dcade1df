import type { AppConfig } from '../config/app-config';
import type { IdempotencyStore, NewClaim, StoredClaim } from './idempotency-store';
import { IdempotencyClaim, IdempotencyService } from './idempotency.service';
import { refusal } from '../../test/support/fake-store';

const WORKSPACE = '6f1d3c0e-0000-4000-8000-000000000001';
const KEY_A = '6f1d3c0e-0000-4000-8000-00000000000a';
const KEY_B = '6f1d3c0e-0000-4000-8000-00000000000b';

/** One workspace's claims in memory. The conditional insert's reclaiming (stale, a day old) is the e2e suites'. */
class FakeIdempotencyStore implements Pick<IdempotencyStore, keyof IdempotencyStore> {
  readonly claims = new Map<string, StoredClaim>();
  /** When set, storing an answer (not the mark without one) fails, as a too-large JSON would. */
  failAnswers = false;

  async claim(claim: NewClaim): Promise<boolean> {
    if (this.claims.has(claim.key)) return false;
    this.claims.set(claim.key, { request_hash: claim.requestHash, status_code: null, response: null, api_key_id: claim.apiKeyId });
    return true;
  }
  async keepAlive(): Promise<void> {}
  async free(_workspaceId: string, key: string): Promise<void> {
    this.claims.delete(key);
  }
  async finish(_workspaceId: string, key: string, statusCode: number, answer: string | null): Promise<void> {
    if (answer !== null && this.failAnswers) throw new Error('value too large');
    const claim = this.claims.get(key)!;
    claim.status_code = statusCode;
    claim.response = answer === null ? null : JSON.parse(answer);
  }
  async find(_workspaceId: string, key: string): Promise<StoredClaim | null> {
    return this.claims.get(key) ?? null;
  }
  async deleteExpired(): Promise<void> {}
}

function service(store: FakeIdempotencyStore): IdempotencyService {
  return new IdempotencyService(store as unknown as IdempotencyStore, { holdTtlMs: 60_000 } as AppConfig);
}

function claim(overrides: Partial<IdempotencyClaim> = {}): IdempotencyClaim {
  return { workspaceId: WORKSPACE, apiKeyId: KEY_A, requestId: 'req-1', key: 'retry-1', body: { n: 1 }, statusCode: 200, ...overrides };
}

describe('IdempotencyService rules (with a store in memory)', () => {
  it('a retry gets the stored answer without running again, only for the same key and body', async () => {
    const store = new FakeIdempotencyStore();
    const idempotency = service(store);
    const execute = jest.fn(async () => ({ answer: 42 }));

    await expect(idempotency.run(claim(), execute)).resolves.toEqual({ response: { answer: 42 }, replayed: false });
    await expect(idempotency.run(claim({ requestId: 'req-2' }), execute)).resolves.toEqual({ response: { answer: 42 }, replayed: true });
    expect(execute).toHaveBeenCalledTimes(1);

    const otherKey = await refusal(idempotency.run(claim({ apiKeyId: KEY_B }), execute));
    expect([otherKey.status, otherKey.code]).toEqual([409, 'idempotency_key_reused']);
    expect(otherKey.message).toMatch(/another API key/);
    const otherBody = await refusal(idempotency.run(claim({ body: { n: 2 } }), execute));
    expect([otherBody.status, otherBody.code]).toEqual([409, 'idempotency_key_reused']);
    expect(otherBody.message).toMatch(/different request body/);
    // The same body on a scoped route is another request.
    expect((await refusal(idempotency.run(claim({ scope: 'responses' }), execute))).code).toBe('idempotency_key_reused');
    expect(execute).toHaveBeenCalledTimes(1);
  });

  it('a retry while the first runs is told so; a failed request frees its key for the retry', async () => {
    const store = new FakeIdempotencyStore();
    const idempotency = service(store);
    let finish!: () => void;
    const first = idempotency.run(claim(), () => new Promise<string>((resolve) => (finish = () => resolve('done'))));
    await new Promise((resolve) => setImmediate(resolve));

    const busy = await refusal(idempotency.run(claim(), async () => 'second'));
    expect([busy.status, busy.code]).toEqual([409, 'idempotent_request_in_progress']);
    finish();
    await expect(first).resolves.toEqual({ response: 'done', replayed: false });

    await expect(idempotency.run(claim({ key: 'retry-2' }), () => Promise.reject(new Error('upstream down')))).rejects.toThrow('upstream down');
    expect(store.claims.has('retry-2')).toBe(false);
    await expect(idempotency.run(claim({ key: 'retry-2' }), async () => 'ran')).resolves.toEqual({ response: 'ran', replayed: false });
  });

  it('an answer that could not be stored still finishes the claim: the retry is told, never run', async () => {
    const store = new FakeIdempotencyStore();
    store.failAnswers = true;
    const idempotency = service(store);
    const execute = jest.fn(async () => 'charged');

    await expect(idempotency.run(claim(), execute)).resolves.toEqual({ response: 'charged', replayed: false });
    const unavailable = await refusal(idempotency.run(claim(), execute));
    expect([unavailable.status, unavailable.code]).toEqual([409, 'idempotent_response_unavailable']);
    expect(execute).toHaveBeenCalledTimes(1);
    // A malformed key is the caller's 400, naming the header.
    const malformed = await refusal(idempotency.run(claim({ key: 'has space' }), execute));
    expect([malformed.status, malformed.param]).toEqual([400, 'Idempotency-Key']);
  });
});
