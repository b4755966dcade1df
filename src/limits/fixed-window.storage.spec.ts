import { FixedWindowMemoryStorage } from './fixed-window.storage';

describe('FixedWindowMemoryStorage', () => {
  let storage: FixedWindowMemoryStorage;
  beforeEach(() => {
    jest.useFakeTimers({ now: new Date('2026-11-22T10:00:00Z') });
    storage = new FixedWindowMemoryStorage();
  });
  afterEach(() => {
    storage.onApplicationShutdown();
    jest.useRealTimers();
  });

  it('counts hits in a window that opens at the first hit, and blocks past the limit', async () => {
    for (let hit = 1; hit <= 3; hit++) {
      expect(await storage.increment('k', 60_000, 3)).toMatchObject({ totalHits: hit, isBlocked: false, timeToExpire: 60 });
    }
    jest.advanceTimersByTime(15_000);
    expect(await storage.increment('k', 60_000, 3)).toEqual({
      totalHits: 4,
      isBlocked: true,
      timeToExpire: 45,
      timeToBlockExpire: 45,
    });
  });

  it('opens a new window once the old one has passed', async () => {
    for (let i = 0; i < 5; i++) await storage.increment('k', 60_000, 3);
    jest.advanceTimersByTime(60_000);
    expect(await storage.increment('k', 60_000, 3)).toMatchObject({ totalHits: 1, isBlocked: false });
  });

  it('keeps keys apart', async () => {
    await storage.increment('a', 60_000, 1);
    expect(await storage.increment('b', 60_000, 1)).toMatchObject({ totalHits: 1, isBlocked: false });
  });
});
