import { Global, Injectable, Module } from '@nestjs/common';

/**
 * What reads of balances, ledgers and usage wait for: the settlements this process answered
 * for and has not committed yet (SETTLEMENT_DURABILITY=journal answers before the commit),
 * so that a client always sees the charge of an answer it was given, on the API and in the
 * dashboard. The chat module's billing says how to wait (`waitWith`); until it does, nothing
 * is pending.
 */
@Injectable()
export class PendingSettlements {
  private waitFor: () => Promise<void> = () => Promise.resolve();

  waitWith(waitFor: () => Promise<void>): void {
    this.waitFor = waitFor;
  }

  /** Resolves once the settlements answered for so far have committed (or, failing, wait for their next try). */
  written(): Promise<void> {
    return this.waitFor();
  }
}

@Global()
@Module({ providers: [PendingSettlements], exports: [PendingSettlements] })
export class PendingSettlementsModule {}
