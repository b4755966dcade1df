import { sameHiddenClass } from '../../test/support/hidden-class';
import { Cancellation } from './cancellation';

describe('Cancellation', () => {
  it('aborts once, calling its listeners in the order they were added, with the reason given', () => {
    const cancellation = new Cancellation();
    const heard: string[] = [];
    cancellation.onAbort((reason) => heard.push(`first ${String(reason)}`));
    cancellation.onAbort((reason) => heard.push(`second ${String(reason)}`));
    expect(cancellation.aborted).toBe(false);
    expect(cancellation.reason).toBeUndefined();
    cancellation.abort('stop');
    cancellation.abort('again');
    expect(heard).toEqual(['first stop', 'second stop']);
    expect(cancellation.aborted).toBe(true);
    expect(cancellation.reason).toBe('stop');
    expect(cancellation.listenerCount).toBe(0);
  });

  it('gives an AbortError as the reason when aborted without one, as AbortController does', () => {
    const cancellation = new Cancellation();
    cancellation.abort();
    expect(cancellation.reason).toBeInstanceOf(DOMException);
    expect((cancellation.reason as DOMException).name).toBe('AbortError');
    expect(cancellation.reason).toBe(cancellation.reason);
  });

  it('calls a listener added after the abort at once, and never one that was removed', () => {
    const cancellation = new Cancellation();
    const removed = jest.fn();
    const remove = cancellation.onAbort(removed);
    expect(cancellation.listenerCount).toBe(1);
    remove();
    expect(cancellation.listenerCount).toBe(0);
    cancellation.abort('gone');
    const late = jest.fn();
    cancellation.onAbort(late);
    expect(removed).not.toHaveBeenCalled();
    expect(late).toHaveBeenCalledWith('gone');
  });

  it('calls every listener when one throws, and throws its error on the next tick', () => {
    const cancellation = new Cancellation();
    const ticks: Array<() => void> = [];
    const nextTick = jest.spyOn(process, 'nextTick').mockImplementation((callback) => void ticks.push(callback as () => void));
    try {
      const after = jest.fn();
      cancellation.onAbort(() => {
        throw new Error('listener failed');
      });
      cancellation.onAbort(after);
      cancellation.abort();
      expect(after).toHaveBeenCalled();
      expect(ticks).toHaveLength(1);
      expect(() => ticks[0]()).toThrow('listener failed');
    } finally {
      nextTick.mockRestore();
    }
  });

  it('follows its sources until unlinked: the first to abort aborts it, with its reason', () => {
    const client = new Cancellation();
    const deadline = new Cancellation();
    const followed = Cancellation.following(client, deadline);
    const unlinked = Cancellation.following(client, deadline);
    unlinked.unlink();
    expect(client.listenerCount).toBe(1);
    expect(deadline.listenerCount).toBe(1);
    deadline.abort('deadline');
    client.abort('client');
    expect(followed.cancellation.reason).toBe('deadline');
    expect(unlinked.cancellation.aborted).toBe(false);
    // Made after its source aborted, it is aborted from the start.
    expect(Cancellation.following(client).cancellation.reason).toBe('client');
  });

  it('makes an AbortSignal only when asked for, which aborts with it, or is aborted already', () => {
    const running = new Cancellation();
    const { signal } = running;
    expect(running.signal).toBe(signal);
    expect(signal.aborted).toBe(false);
    running.abort('stop');
    expect(signal.aborted).toBe(true);
    expect(signal.reason).toBe('stop');

    const ended = new Cancellation();
    ended.abort();
    expect(ended.signal.aborted).toBe(true);
    expect((ended.signal.reason as DOMException).name).toBe('AbortError');
  });

  it('is made with one hidden class, listened to and aborted or not (on Node 20 each AbortSignal has its own)', () => {
    const made = Array.from({ length: 50 }, (_, index) => {
      const cancellation = new Cancellation();
      if (index % 2 === 0) cancellation.onAbort(() => undefined);
      if (index % 3 === 0) cancellation.abort();
      return cancellation;
    });
    expect(made.every((cancellation) => sameHiddenClass(cancellation, made[0]))).toBe(true);
  });
});
