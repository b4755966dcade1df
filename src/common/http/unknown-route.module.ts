import { Module } from '@nestjs/common';
import { UnknownRouteController } from './unknown-route.controller';

/** Imported last by AppModule: routes are registered in module order, and this one catches all. */
@Module({ controllers: [UnknownRouteController] })
export class UnknownRouteModule {}
