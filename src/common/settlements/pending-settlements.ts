import { Injectable, Module } from '@nestjs/common';

/** The longest a read waits for a workspace's settlements; then it reads what has committed. */
const WAIT_LIMIT_MS = 5_000;

/**
 * What reads of balances, ledgers and usage wait for: the settlements of the workspace that
 * this process answered for and has not committed yet (SETTLEMENT_DURABILITY=journal answers
 * before the commit), so that a client sees the charge of every answer it was given, on the
 * API and in the dashboard. At most WAIT_LIMIT_MS: a settlement that cannot commit (the
 * database is down) does not hold reads up for longer. The chat module's billing says how to
 * wait (`waitWith`); until it does, nothing is pending.
 *
 * Here rather than in src/billing/: the wallet and usage modules read it, and billing depends
 * on both (a folder cycle otherwise). Not global: a module whose providers read it imports
 * PendingSettlementsModule, and Nest refuses to start when one forgets (see BillingModule).
 */
@Injectable()
export class PendingSettlements {
  private waitFor: (workspaceId: string) => Promise<void> = () => Promise.resolve();

  waitWith(waitFor: (workspaceId: string) => Promise<void>): void {
    this.waitFor = waitFor;
  }

  /** Resolves once the workspace's settlements answered for so far have committed, or after WAIT_LIMIT_MS. */
  async written(workspaceId: string): Promise<void> {
    let timer: NodeJS.Timeout | undefined;
    const limit = new Promise<void>((resolve) => (timer = setTimeout(resolve, WAIT_LIMIT_MS).unref()));
    try {
      await Promise.race([this.waitFor(workspaceId), limit]);
    } finally {
      clearTimeout(timer);
    }
  }
}

/** One instance for the whole app: Nest shares a module's providers with every module importing it. */
@Module({ providers: [PendingSettlements], exports: [PendingSettlements] })
export class PendingSettlementsModule {}
