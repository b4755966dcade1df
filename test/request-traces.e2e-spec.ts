import { NOTHING_USED, UsageService } from '../src/usage/usage.service';
import { WalletService } from '../src/wallet/wallet.service';
import { startTestApp, TestApp } from './support/test-app';

/**
 * What a request leaves behind, asked of the modules that own it (the idempotency claim
 * tells a request under way, charged or dead by these): its hold in the wallet, its usage
 * record. Each answer is scoped to the workspace.
 */
describe('traces of a request: WalletService.hasHoldFor and UsageService.hasRecordFor', () => {
  let t: TestApp;
  beforeAll(async () => {
    t = await startTestApp();
  });
  afterAll(async () => {
    await t?.close();
  });

  it('hasHoldFor: true while the request holds money, false once the hold is released and for another workspace', async () => {
    const wallet = t.app.get(WalletService);
    const workspace = await t.createWorkspace();
    const other = await t.createWorkspace();
    expect(await wallet.hasHoldFor(workspace.id, 'req-hold')).toBe(false);
    const hold = await wallet.hold(workspace.id, 'req-hold', 1_000, 60_000);
    expect(hold).not.toBeNull();
    expect(await wallet.hasHoldFor(workspace.id, 'req-hold')).toBe(true);
    expect(await wallet.hasHoldFor(other.id, 'req-hold')).toBe(false);
    await wallet.release(hold!);
    expect(await wallet.hasHoldFor(workspace.id, 'req-hold')).toBe(false);
  });

  it('hasRecordFor: true for a record created at or after `since`, false before it and for another workspace', async () => {
    const usage = t.app.get(UsageService);
    const workspace = await t.createWorkspace();
    const other = await t.createWorkspace();
    const before = new Date(Date.now() - 60_000);
    expect(await usage.hasRecordFor(workspace.id, 'req-record', before)).toBe(false);
    await usage.insert({
      ...NOTHING_USED,
      toolsUsed: [],
      workspaceId: workspace.id,
      requestId: 'req-record',
      apiKeyId: null,
      assistantId: null,
      model: 'gpt-4o-mini',
      latencyMs: 1,
      stream: false,
      source: 'api',
      status: 'error',
      errorCode: 'test',
      userId: null,
      subscriptionId: null,
    });
    expect(await usage.hasRecordFor(workspace.id, 'req-record', before)).toBe(true);
    expect(await usage.hasRecordFor(workspace.id, 'req-record', new Date(Date.now() + 60_000))).toBe(false);
    expect(await usage.hasRecordFor(other.id, 'req-record', before)).toBe(false);
  });
});
