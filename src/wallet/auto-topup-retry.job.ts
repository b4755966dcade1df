import { Injectable, Logger } from '@nestjs/common';
import { Interval } from '@nestjs/schedule';
import { AutoTopupScheduler } from './auto-topup-scheduler';

/** Every minute: retries failed auto top-up payments that are due, and resumes interrupted ones. */
@Injectable()
export class AutoTopupRetryJob {
  private readonly logger = new Logger('AutoTopupRetryJob');
  private running = false;

  constructor(private readonly autoTopup: AutoTopupScheduler) {}

  @Interval(60_000)
  async run(): Promise<void> {
    if (this.running) return; // A slow payment provider must not pile up runs.
    this.running = true;
    try {
      await this.autoTopup.runDueRetries();
    } catch (error) {
      this.logger.error(`Auto top-up retries failed: ${error instanceof Error ? error.message : String(error)}`);
    } finally {
      this.running = false;
    }
  }
}
