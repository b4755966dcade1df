import { Global, Module } from '@nestjs/common';
import { ServerDrain } from '../common/http/server-drain';
import { DatabaseProbe } from './database-probe';
import { HealthController } from './health.controller';

/**
 * The probes, and the server's graceful stop they report on. Global: the chat service
 * ends its open streams when the stop's drain deadline passes.
 */
@Global()
@Module({ controllers: [HealthController], providers: [ServerDrain, DatabaseProbe], exports: [ServerDrain] })
export class HealthModule {}
