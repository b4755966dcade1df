import { Module } from '@nestjs/common';
import { ServerDrainModule } from '../common/http/server-drain.module';
import { DatabaseProbe } from './database-probe';
import { HealthController } from './health.controller';

/** The probes; readiness reports the server's graceful stop (ServerDrainModule). */
@Module({ imports: [ServerDrainModule], controllers: [HealthController], providers: [DatabaseProbe] })
export class HealthModule {}
