import { PendingSettlements } from './pending-settlements';

describe('PendingSettlements', () => {
  afterEach(() => jest.useRealTimers());

  it('waits for the workspace it is asked about', async () => {
    const pending = new PendingSettlements();
    const asked: string[] = [];
    pending.waitWith(async (workspaceId) => void asked.push(workspaceId));
    await pending.written('ws-1');
    expect(asked).toEqual(['ws-1']);
  });

  it('gives up waiting after 5 s: a settlement that cannot commit does not hold reads up', async () => {
    jest.useFakeTimers();
    const pending = new PendingSettlements();
    pending.waitWith(() => new Promise<void>(() => undefined));
    let done = false;
    const read = pending.written('ws-1').then(() => (done = true));
    await jest.advanceTimersByTimeAsync(4_999);
    expect(done).toBe(false);
    await jest.advanceTimersByTimeAsync(1);
    await read;
    expect(done).toBe(true);
  });
});
