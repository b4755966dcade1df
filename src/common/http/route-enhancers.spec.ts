import {
  ArgumentsHost,
  Body,
  CallHandler,
  CanActivate,
  Catch,
  Controller,
  ExceptionFilter,
  ExecutionContext,
  Injectable,
  Module,
  NestInterceptor,
  ParseIntPipe,
  PipeTransform,
  Post,
  Scope,
  UseFilters,
  UseGuards,
  UseInterceptors,
  UsePipes,
} from '@nestjs/common';
import { APP_FILTER, APP_GUARD, APP_INTERCEPTOR, APP_PIPE, ApplicationConfig } from '@nestjs/core';
import { Test } from '@nestjs/testing';
import { enhancersOf } from './route-enhancers';

@Injectable()
class KeyGuard implements CanActivate {
  canActivate() {
    return true;
  }
}
@Injectable()
class AuditInterceptor implements NestInterceptor {
  intercept(_context: ExecutionContext, next: CallHandler) {
    return next.handle();
  }
}
@Injectable({ scope: Scope.REQUEST })
class PerRequestInterceptor extends AuditInterceptor {}
@Injectable()
class TrimPipe implements PipeTransform {
  transform(value: unknown) {
    return value;
  }
}
@Catch()
class LastResortFilter implements ExceptionFilter {
  catch(_error: unknown, _host: ArgumentsHost) {}
}
class ControllerGuard extends KeyGuard {}
class HandlerInterceptor extends AuditInterceptor {}
class HandlerPipe extends TrimPipe {}
class ControllerFilter extends LastResortFilter {}

@UseGuards(ControllerGuard)
@UseFilters(new ControllerFilter())
@Controller('things')
class ThingsController {
  @Post()
  @UseInterceptors(HandlerInterceptor)
  @UsePipes(HandlerPipe)
  create(@Body('count', ParseIntPipe) count: number) {
    return count;
  }

  @Post('plain')
  plain() {}
}

/** APP_* providers in a module of their own, not the root: Nest makes them global from any module. */
@Module({
  providers: [
    KeyGuard,
    { provide: APP_GUARD, useExisting: KeyGuard },
    { provide: APP_INTERCEPTOR, useClass: AuditInterceptor },
    { provide: APP_INTERCEPTOR, useClass: PerRequestInterceptor },
    { provide: APP_PIPE, useClass: TrimPipe },
    { provide: APP_FILTER, useClass: LastResortFilter },
  ],
})
class EnhancersModule {}

@Module({ imports: [EnhancersModule], controllers: [ThingsController] })
class RootModule {}

describe('enhancersOf', () => {
  it("finds what Nest runs around a handler: APP_* providers of any module (request-scoped too), app.useGlobal*, the controller's, the handler's and its parameters'", async () => {
    const testing = await Test.createTestingModule({ imports: [RootModule] }).compile();
    const app = testing.createNestApplication({ logger: false });
    app.useGlobalGuards({ canActivate: () => true });
    app.useGlobalFilters(new ControllerFilter());
    try {
      const found = enhancersOf(app.get(ApplicationConfig), { controller: ThingsController, method: 'create' });
      expect(found.map(({ kind, scope, name }) => `${scope} ${kind} ${name}`).sort()).toEqual(
        [
          'global guard KeyGuard',
          'global guard an object (canActivate)',
          'global interceptor AuditInterceptor',
          'global interceptor PerRequestInterceptor',
          'global pipe TrimPipe',
          'global filter LastResortFilter',
          'global filter ControllerFilter',
          'route guard ControllerGuard',
          'route filter ControllerFilter',
          'route interceptor HandlerInterceptor',
          'route pipe HandlerPipe',
          'route pipe ParseIntPipe',
        ].sort(),
      );
      expect(found.find((enhancer) => enhancer.name === 'AuditInterceptor')?.type).toBe(AuditInterceptor);
      // Another handler of the same controller: the globals and the controller's only.
      const plain = enhancersOf(app.get(ApplicationConfig), { controller: ThingsController, method: 'plain' });
      expect(plain.filter((enhancer) => enhancer.scope === 'route').map((enhancer) => enhancer.name).sort()).toEqual(['ControllerFilter', 'ControllerGuard']);
    } finally {
      await app.close();
    }
  });

  it('finds nothing in an application without enhancers, and refuses a method the controller does not have', () => {
    class Bare {
      handle() {}
    }
    expect(enhancersOf(new ApplicationConfig(), { controller: Bare, method: 'handle' })).toEqual([]);
    expect(() => enhancersOf(new ApplicationConfig(), { controller: Bare, method: 'missing' })).toThrow('Bare has no method missing');
  });
});
