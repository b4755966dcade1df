import type { Type } from '@nestjs/common';
import {
  EXCEPTION_FILTERS_METADATA,
  GUARDS_METADATA,
  INTERCEPTORS_METADATA,
  PIPES_METADATA,
  ROUTE_ARGS_METADATA,
} from '@nestjs/common/constants';
import type { ApplicationConfig } from '@nestjs/core';
import type { InstanceWrapper } from '@nestjs/core/injector/instance-wrapper';

export type EnhancerKind = 'guard' | 'interceptor' | 'pipe' | 'filter';

/** One guard, interceptor, pipe or filter Nest runs around a route's handler. */
export interface RouteEnhancer {
  kind: EnhancerKind;
  /** Global: `APP_*` providers and `app.useGlobal*`; route: `@Use*` on the controller, the handler or a parameter. */
  scope: 'global' | 'route';
  /** Its class (`undefined` for a plain object); what a direct route's list of known enhancers names. */
  type: Type<unknown> | undefined;
  /** For people: the class's name, or what it is. */
  name: string;
}

/** A route's handler as Nest knows it: the controller class and the method's name. */
export interface NestHandler {
  controller: Type<unknown>;
  method: string;
}

const ROUTE_METADATA: Record<EnhancerKind, string> = {
  guard: GUARDS_METADATA,
  interceptor: INTERCEPTORS_METADATA,
  pipe: PIPES_METADATA,
  filter: EXCEPTION_FILTERS_METADATA,
};

/**
 * Every guard, interceptor, pipe and filter Nest runs around `handler`: the global ones as
 * the application has them now (`APP_*` providers of any module, which Nest adds to the
 * ApplicationConfig when it makes the application, request-scoped ones included, and
 * `app.useGlobal*`), then those of the controller, the handler and its parameters.
 */
export function enhancersOf(application: ApplicationConfig, { controller, method }: NestHandler): RouteEnhancer[] {
  const handler = (controller.prototype as Record<string, unknown>)[method];
  if (typeof handler !== 'function') throw new Error(`${controller.name} has no method ${method}`);
  const global: [EnhancerKind, unknown[], InstanceWrapper[]][] = [
    ['guard', application.getGlobalGuards(), application.getGlobalRequestGuards()],
    ['interceptor', application.getGlobalInterceptors(), application.getGlobalRequestInterceptors()],
    ['pipe', application.getGlobalPipes(), application.getGlobalRequestPipes()],
    ['filter', application.getGlobalFilters(), application.getGlobalRequestFilters()],
  ];
  const found: RouteEnhancer[] = [];
  for (const [kind, instances, requestScoped] of global) {
    for (const instance of instances) if (instance != null) found.push(describe(kind, 'global', instance));
    for (const wrapper of requestScoped) found.push(describe(kind, 'global', providedClass(wrapper)));
  }
  for (const kind of Object.keys(ROUTE_METADATA) as EnhancerKind[]) {
    for (const target of [controller, handler]) {
      for (const enhancer of (Reflect.getMetadata(ROUTE_METADATA[kind], target) as unknown[] | undefined) ?? []) {
        found.push(describe(kind, 'route', enhancer));
      }
    }
  }
  // Pipes of one parameter: `@Body(SomePipe)`, or a custom parameter decorator's.
  const parameters = (Reflect.getMetadata(ROUTE_ARGS_METADATA, controller, method) as Record<string, { pipes?: unknown[] }> | undefined) ?? {};
  for (const parameter of Object.values(parameters)) {
    for (const pipe of parameter.pipes ?? []) found.push(describe('pipe', 'route', pipe));
  }
  return found;
}

/** An enhancer is given as its class (Nest makes it) or as an instance. */
function describe(kind: EnhancerKind, scope: RouteEnhancer['scope'], enhancer: unknown): RouteEnhancer {
  const type =
    typeof enhancer === 'function'
      ? (enhancer as Type<unknown>)
      : typeof enhancer === 'object' && enhancer !== null && enhancer.constructor !== Object
        ? (enhancer.constructor as Type<unknown>)
        : undefined;
  return { kind, scope, type, name: type?.name || `an object (${Object.keys(enhancer ?? {}).join(', ')})` };
}

/** A request-scoped `APP_*` provider has no instance yet: its class (`useClass`, or what `useExisting` names). */
function providedClass(wrapper: InstanceWrapper): unknown {
  const aliased = wrapper.isAlias ? wrapper.inject?.[0] : undefined;
  if (typeof aliased === 'function') return aliased;
  return wrapper.metatype ?? { [String(wrapper.name ?? wrapper.token)]: true };
}
