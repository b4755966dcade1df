import { Module } from '@nestjs/common';
import { ServerDrain } from './server-drain';

/**
 * The server's graceful stop (ServerDrain): one instance, imported by the modules that take
 * part in it: health reports it, chat ends its open streams at the drain's deadline.
 */
@Module({ providers: [ServerDrain], exports: [ServerDrain] })
export class ServerDrainModule {}
