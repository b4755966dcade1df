import type { CanActivate } from '@nestjs/common';
import { GUARDS_METADATA, INTERCEPTORS_METADATA } from '@nestjs/common/constants';
import type { Response } from 'express';
import { of } from 'rxjs';
import { ApiError } from '../common/errors/api-error';
import type { ApiRequest } from '../common/http/request-context';
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

  describe('a request refused by a guard', () => {
    /** The route with these guards; the controller and the refusal filter note what reaches them. */
    const route = (guards: CanActivate[]) => {
      const refused: ApiError[] = [];
      const created: unknown[] = [];
      const controller = { create: (...args: unknown[]) => Promise.resolve(void created.push(args)) } as unknown as ChatController;
      const refusals = { catch: (error: ApiError) => void refused.push(error) } as unknown as ChatRefusalFilter;
      const handled = chatCompletionsRoute(controller, guards, refusals);
      const handle = () => handled.handle({ headers: {} } as ApiRequest, {} as Response);
      return { handle, refused, created };
    };

    it.each([
      ['false', () => false],
      ['a Promise of false', () => Promise.resolve(false)],
      ['an Observable of false', () => of(false)],
    ])("goes to the controller's filter as Nest's 403 when a guard answers %s, and never reaches the controller", async (_name, verdict) => {
      const { handle, refused, created } = route([{ canActivate: verdict }]);
      await handle();
      expect(refused.map((error) => [error.status, error.message])).toEqual([[403, 'Forbidden resource']]);
      expect(created).toEqual([]);
    });

    it('passes an ApiError a guard throws to the filter, and rejects with any other error (for the error filter of every route)', async () => {
      const limited = route([{ canActivate: () => Promise.reject(ApiError.rateLimited('Slow down.', 3)) }]);
      await limited.handle();
      expect(limited.refused.map((error) => error.status)).toEqual([429]);
      const broken = route([{ canActivate: () => Promise.reject(new Error('storage down')) }]);
      await expect(broken.handle()).rejects.toThrow('storage down');
      expect(broken.refused).toEqual([]);
      expect(broken.created).toEqual([]);
    });
  });
});
