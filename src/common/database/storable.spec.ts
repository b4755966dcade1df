import { storable } from './storable';

describe('storable', () => {
  it('replaces each NUL and lone surrogate with U+FFFD, and keeps surrogate pairs', () => {
    expect(storable('a\u0000b\ud800c\udc00d\ud83d\ude00')).toBe('a\ufffdb\ufffdc\ufffdd\ud83d\ude00');
  });

  it('returns what needs no change as it is, without copying', () => {
    const record = { model: 'gpt-4o-mini', toolsUsed: ['web_search'], nerfing: [{ rule: 'r', tokens: 3 }], latencyMs: 12, errorCode: null };
    expect(storable(record)).toBe(record);
    expect(storable(record.toolsUsed)).toBe(record.toolsUsed);
  });

  it('copies only the objects and arrays on the way to a change, keeping key order and the rest as they are', () => {
    const untouched = { deep: ['ok'] };
    const value = { first: 1, untouched, messages: [{ role: 'user', content: 'ok' }, { role: 'assistant', content: 'bad\u0000' }], ['k\udfff']: 'v', last: 'x' };
    const result = storable(value);
    expect(result).toEqual({
      first: 1,
      untouched: { deep: ['ok'] },
      messages: [{ role: 'user', content: 'ok' }, { role: 'assistant', content: 'bad\ufffd' }],
      ['k\ufffd']: 'v',
      last: 'x',
    });
    expect(Object.keys(result)).toEqual(['first', 'untouched', 'messages', 'k\ufffd', 'last']);
    expect(result).not.toBe(value);
    expect(result.untouched).toBe(untouched);
    expect(result.messages).not.toBe(value.messages);
    expect(result.messages[0]).toBe(value.messages[0]);
    // The input is left as it was.
    expect(value.messages[1].content).toBe('bad\u0000');
  });

  it('keeps a "__proto__" key (an own key of parsed JSON) a key when it copies', () => {
    const value = JSON.parse('{"a": "x\\u0000", "__proto__": {"b": 2}}') as Record<string, unknown>;
    const result = storable(value);
    expect(Object.getPrototypeOf(result)).toBe(Object.prototype);
    expect(Object.keys(result)).toEqual(['a', '__proto__']);
    expect(JSON.stringify(result)).toBe('{"a":"x\ufffd","__proto__":{"b":2}}');
  });
});
