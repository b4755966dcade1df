import type { CanActivate } from '@nestjs/common';
import { ApplicationConfig } from '@nestjs/core';
import { GUARDS_METADATA, INTERCEPTORS_METADATA } from '@nestjs/common/constants';
import type { Response } from 'express';
import { of } from 'rxjs';
import { ApiError } from '../common/errors/api-error';
import { ApiExceptionFilter } from '../common/errors/api-exception.filter';
import { unrunEnhancers } from '../common/http/direct-route';
import { createValidationPipe } from '../common/validation/validation.pipe';
import { IdempotencyInterceptor } from '../idempotency/idempotency.interceptor';
import type { ApiRequest } from '../common/http/request-context';
import { chatCompletionsRoute } from './chat-direct-route';
import type { ChatRefusalFilter } from './chat-refusal.filter';
import { ChatController } from './chat.controller';

/** A stand-in for the API's guards (the real ones need the database). */
class KeyGuard implements CanActivate {
  canActivate() {
    return true;
  }
}

/** The global enhancers createApp gives the application, as instances of their classes (without their dependencies). */
function productionGlobals(guards: CanActivate[]): ApplicationConfig {
  const application = new ApplicationConfig();
  application.useGlobalGuards(...guards);
  application.useGlobalInterceptors(Object.create(IdempotencyInterceptor.prototype) as IdempotencyInterceptor);
  application.useGlobalFilters(Object.create(ApiExceptionFilter.prototype) as ApiExceptionFilter);
  application.useGlobalPipes(createValidationPipe());
  return application;
}

describe('chatCompletionsRoute', () => {
  const guards = [new KeyGuard()];
  const make = () => chatCompletionsRoute({} as ChatController, guards, {} as ChatRefusalFilter);
  const unrun = (application = productionGlobals(guards)) => unrunEnhancers([make()], application);

  it("runs, or knowingly does without, every enhancer of Nest's route as the application has it, each with why", () => {
    expect(make()).toMatchObject({ method: 'POST', path: '/v1/chat/completions', handler: { controller: ChatController, method: 'create' } });
    expect(unrun()).toEqual([]);
    expect(make().runs.map((known) => `${known.kind} ${known.type.name}`)).toEqual([
      'guard KeyGuard',
      'interceptor IdempotencyInterceptor',
      'filter ApiExceptionFilter',
      'filter ChatRefusalFilter',
      'pipe ValidationPipe',
    ]);
    for (const known of make().runs) expect(known.why.length).toBeGreaterThan(20);
  });

  it.each([
    ['a guard on the handler', 'route guard Added', GUARDS_METADATA, ChatController.prototype.create],
    ['an interceptor on the controller', 'route interceptor Added', INTERCEPTORS_METADATA, ChatController],
  ])('names %s, which it would skip', (_name, named, key, target) => {
    Reflect.defineMetadata(key, [class Added {}], target);
    try {
      expect(unrun()).toEqual([expect.stringContaining(`does not run the ${named} (on ChatController.create)`)]);
    } finally {
      Reflect.deleteMetadata(key, target);
    }
    expect(unrun()).toEqual([]);
  });

  it('names a global guard it was not given, and a global interceptor, pipe or filter it does not know', () => {
    const application = productionGlobals(guards);
    class AuditInterceptor {
      intercept = () => undefined;
    }
    application.useGlobalGuards(new (class TenantGuard extends KeyGuard {})());
    application.useGlobalInterceptors(new AuditInterceptor() as never);
    application.useGlobalPipes(new (class TrimPipe {
      transform = (value: unknown) => value;
    })());
    application.useGlobalFilters(new (class SentryFilter {
      catch = () => undefined;
    })());
    expect(unrun(application).map((problem) => /the (global \w+ \w+)/.exec(problem)?.[1])).toEqual([
      'global guard TenantGuard',
      'global interceptor AuditInterceptor',
      'global pipe TrimPipe',
      'global filter SentryFilter',
    ]);
  });

  it('does without the global ValidationPipe only while create takes no class, which the pipe would validate', () => {
    const types = Reflect.getMetadata('design:paramtypes', ChatController.prototype, 'create') as unknown[];
    class ChatRequestDto {}
    Reflect.defineMetadata('design:paramtypes', [Object, ChatRequestDto, Object, Object], ChatController.prototype, 'create');
    try {
      expect(unrun()).toEqual([expect.stringContaining('does not run the global pipe ValidationPipe')]);
    } finally {
      Reflect.defineMetadata('design:paramtypes', types, ChatController.prototype, 'create');
    }
    expect(unrun()).toEqual([]);
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
