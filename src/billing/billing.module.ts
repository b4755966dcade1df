import { Module } from '@nestjs/common';
import { PendingSettlementsModule } from '../common/settlements/pending-settlements';
import { ConversationsModule } from '../conversations/conversations.module';
import { MetricsModule } from '../metrics/metrics.module';
import { UsageModule } from '../usage/usage.module';
import { WalletModule } from '../wallet/wallet.module';
import { Billing } from './billing';

/**
 * # Billing: what a request's money goes through
 *
 * Every chat request (and the Responses API, the widget and the playground, which run
 * through ChatService) is billed here, from the money set aside before the first model call
 * to the one settlement that charges it. Each request is charged exactly once.
 *
 * ## Files
 * - `billing.ts`: `Billing`, the provider. Opens a session per request, records requests
 *   refused before any money was held, owns the SettlementWriter and writes what dead
 *   processes left in their journals at start and every 10 s.
 * - `billing-session.ts`: `BillingSession`, one request's money: hold, meter, settle or fail.
 * - `spend.ts`: `Spend`, what a request used (tokens, tool calls, cost in micro-millicents)
 *   and the answer's `x_service`.
 * - `settlement-writer.ts`: `SettlementWriter`, writes settlements many to a transaction
 *   (group commit), retries, journals.
 * - `settlement-journal.ts`: `SettlementJournal`, the files under DATA_DIR that keep what was
 *   answered for and not yet committed.
 * - `usage-record.ts`: the one builder of a usage record (charged or refused).
 * - `sql/*.sql`: settle_charges(), insert_usage_records(), usage_record_id(); see below.
 * - Outside this folder, below it in the dependency graph (billing uses them, they never
 *   import billing): `wallet/wallet.service.ts` (holds and the call of settle_charges),
 *   `wallet/wallet-leases.ts` (leases), `wallet/hold-sweeper.ts`, `wallet/cost.ts` (prices
 *   to micro-millicents), and `common/settlements/pending-settlements.ts` (what reads wait
 *   for). They stay there because the wallet's own reads use them: the wallet and usage
 *   modules read PendingSettlements, and billing depends on both, so a PendingSettlements in
 *   this folder would be a folder cycle (src/module-boundaries.spec.ts).
 *
 * ## How a request is billed
 * 1. **Set aside.** `BillingSession.open` asks `WalletService.reserve` for prompt + output
 *    cap at the model's prices. It is admitted from this process's lease on the workspace's
 *    wallet (WalletLeases: a wallet_holds row that reserves a budget, so a request costs no
 *    write to the wallet's row), or else gets a hold of its own (one conditional statement:
 *    `balance - reserved >= amount`). When the wallet cannot cover the cap, the cap is lowered
 *    to what it can; below 16 useful tokens the request is refused with 402 and recorded
 *    (`Billing.recordRefused`, never charged). A hold of its own is kept alive while the
 *    request runs; the HoldSweeper releases those of processes that died.
 * 2. **Meter.** Each model call and server tool call adds to `Spend`; before each further
 *    iteration of a tool loop the hold is raised (or the loop ends for lack of funds).
 * 3. **Settle.** One settlement per request: the exact cost, the usage record (and, with a
 *    conversation, the turn) in one transaction, through `SettlementWriter.submit`, which
 *    batches concurrent settlements into one call of settle_charges(): holds/leases then
 *    wallets locked in id order (no deadlocks between batches), each charge capped at what
 *    the wallet can cover (the rest written off and logged), the hold released or the charge
 *    taken out of the lease, each wallet written once.
 * 4. **Journal (SETTLEMENT_DURABILITY=journal, the default).** A plain leased settlement is
 *    appended to the journal with a synchronous write and the request answered before the
 *    commit; the writer commits it next. Reads of balances, ledgers and usage wait for those
 *    of their workspace (PendingSettlements, at most 5 s). A process that dies leaves the
 *    file; the next one on that DATA_DIR writes it. Any other settlement (a hold of its own,
 *    a conversation turn, a refund, an Idempotency-Key, or SETTLEMENT_DURABILITY=commit)
 *    answers its request once committed.
 * 5. **Retries.** A batch that fails is written again one settlement at a time with
 *    `retry` (p_check_applied): rows that committed unseen are looked up, not written twice;
 *    a usage record or turn the database refuses as data is counted and the charge still
 *    commits. A journaled settlement is retried with backoff (0.5 s doubling to 30 s) until
 *    it commits, never failed back to its request.
 * 6. **Refunds.** A request that fails before anything reached its client is charged what it
 *    used and refunded in the same transaction (both ledger rows, net zero). A stream that
 *    delivered content is charged for it whatever ends it; a client that left pays for what
 *    was generated and for a prompt sent upstream.
 *
 * ## Idempotency keys per ledger row
 * The settlement's key is the hold's id (a lease-admitted request gets its own UUID). Its
 * ledger rows are `usage:<key>` (the charge) and `refund:<key>` (the refund), unique in
 * wallet_transactions; its usage record's id is usage_record_id(key). So a settlement
 * written twice (a retry after an unseen commit, a journal written by two processes) charges
 * once and records once. A charge of 0 writes no ledger row; its usage record marks it applied.
 *
 * ## Changing an SQL function
 * The current text of every function the migrations define is in a `sql/<name>.sql` file
 * beside its owner (here for the settlement's, `usage/sql/` and `conversations/sql/` for the
 * others). To change one: edit the .sql file, then add a migration
 * (`migrations/<timestamp>-<Name>.ts`) that applies the same text with
 * `CREATE OR REPLACE FUNCTION` (a copy of the file in a template string: dist holds no .sql
 * files, and a migration must keep meaning what it meant when it ran). Changing the
 * arguments makes a new function: drop the old signature in the same migration.
 * src/database/sql-functions.spec.ts fails until the latest migration's text equals the
 * file (whitespace aside), and when a function has no file.
 */
@Module({
  imports: [WalletModule, UsageModule, ConversationsModule, MetricsModule, PendingSettlementsModule],
  providers: [Billing],
  exports: [Billing],
})
export class BillingModule {}
