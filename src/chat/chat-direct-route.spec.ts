import { GUARDS_METADATA, INTERCEPTORS_METADATA } from '@nestjs/common/constants';
import { chatCompletionsRoute } from './chat-direct-route';
import type { ChatRefusalFilter } from './chat-refusal.filter';
import { ChatController } from './chat.controller';

describe('chatCompletionsRoute', () => {
  const make = () => chatCompletionsRoute({} as ChatController, [], {} as ChatRefusalFilter);

  it('is made for the controller as it is: its one filter, no guard, interceptor or pipe of its own', () => {
    expect(make()).toMatchObject({ method: 'POST', path: '/v1/chat/completions' });
  });

  it.each([
    ['a guard on the handler', GUARDS_METADATA, ChatController.prototype.create],
    ['an interceptor on the controller', INTERCEPTORS_METADATA, ChatController],
  ])('refuses to be made once the controller has %s, which it would skip', (_name, key, target) => {
    Reflect.defineMetadata(key, [class Added {}], target);
    try {
      expect(make).toThrow(`ChatController has ${key}`);
    } finally {
      Reflect.deleteMetadata(key, target);
    }
    expect(make).not.toThrow();
  });

  it('leaves a request with an Idempotency-Key to Nest (its interceptor)', () => {
    const route = make();
    expect(route.accepts({ headers: {} } as never)).toBe(true);
    expect(route.accepts({ headers: { 'idempotency-key': 'k' } } as never)).toBe(false);
  });
});
