import { Logger } from '@nestjs/common';
import type { EntityManager } from 'typeorm';
import { ApiError } from '../common/errors/api-error';
import type { AppConfig } from '../config/app-config';
import { PendingSettlements } from '../common/settlements/pending-settlements';
import type { AppendTurnParams } from '../conversations/conversation-turns';
import type { ModelDefinition } from '../models/model-catalog';
import type { ChatMessage } from '../providers/provider-adapter';
import { countPromptTokensAsync } from '../providers/tokens';
import type { NewUsageRecord } from '../usage/usage.service';
import type { Charge, Hold, Settlement, SettlementOrder } from '../wallet/wallet.service';
import { Billing } from './billing';
import { BillingIncidents, BillingPorts, BillingSession, Estimate, SpendingReservation } from './billing-session';
import { SettlementWriter } from './settlement-writer';

/** gpt-4o's prices, millicents per million tokens. */
const MODEL: ModelDefinition = {
  id: 'gpt-4o',
  provider: 'openai',
  upstreamModel: 'gpt-4o',
  ownedBy: 'openai',
  created: 0,
  contextLength: 128_000,
  maxOutputTokens: 16_384,
  vision: true,
  functionCalling: true,
  inputPrice: 250_000,
  outputPrice: 1_000_000,
  cachedInputPrice: 125_000,
  cacheWritePrice: 250_000,
};
const TTL_MS = 60_000;
const PROMPT: ChatMessage[] = [{ role: 'user', content: 'What is the weather in Paris today?' }];
const REPLY: ChatMessage = { role: 'assistant', content: 'Sunny.' };

/** A transaction's manager, as far as savepoints go: it notes the statements. */
class FakeManager {
  readonly statements: string[] = [];
  async query(sql: string): Promise<unknown[]> {
    this.statements.push(sql);
    return [];
  }
}

interface SettleCall {
  hold: Hold;
  charge: Charge;
  refund: boolean;
  settlement: Settlement;
}

/** The wallet in memory: conditional holds, settlements that can fail a number of times, releases. */
class FakeWallet implements Pick<BillingPorts['wallet'], keyof BillingPorts['wallet']> {
  reserved = 0;
  holds: Hold[] = [];
  settled: SettleCall[] = [];
  released: string[] = [];
  kept = 0;
  /** Settlements that throw before one goes through. */
  failingSettlements = 0;
  /** Where the usage rows of the settlements go (the database's usage_records). */
  usage = new FakeUsage();
  readonly manager = new FakeManager();

  /** Set by setUp: what a rolled-back transaction must undo beside the wallet. */
  onBegin: () => { rollback(): void } = () => ({ rollback: () => undefined });

  constructor(public balanceMillicents: number) {}

  get available(): number {
    return this.balanceMillicents - this.reserved;
  }

  async reserve(workspaceId: string, requestId: string, amountMillicents: number): Promise<Hold | null> {
    if (amountMillicents > this.available) return null;
    this.reserved += amountMillicents;
    const hold = { id: `hold-${this.holds.length + 1}`, workspaceId, amountMillicents };
    this.holds.push(hold);
    return hold;
  }

  async spendable() {
    return this.available;
  }

  async extendHold(hold: Hold, extraMillicents: number): Promise<boolean> {
    if (extraMillicents <= 0) return true;
    if (extraMillicents > this.available) return false;
    this.reserved += extraMillicents;
    hold.amountMillicents += extraMillicents;
    return true;
  }

  async keepHoldAlive(): Promise<void> {
    this.kept += 1;
  }

  /** Settles a batch, as WalletService.settleMany does: all of it, with what is written beside, or (failing) none. */
  async settleMany(
    orders: SettlementOrder[],
    options: { alsoInTransaction?: (manager: EntityManager, settlements: Settlement[]) => Promise<void>; recordsOptional?: boolean } = {},
  ): Promise<Settlement[]> {
    if (this.failingSettlements > 0) {
      this.failingSettlements -= 1;
      throw new Error('connection terminated');
    }
    const recordRefused = this.usage.refuse && orders.some((order) => order.usageRow);
    if (recordRefused && !options.recordsOptional) throw new Error('usage_records refused');
    const settlements = orders.map(({ charge, refund }): Settlement => {
      const charged = Number((charge.costMicros + 999_999n) / 1_000_000n);
      return {
        chargedMillicents: charged,
        keptMillicents: refund ? 0 : charged,
        writtenOffMillicents: 0,
        balanceAfterMillicents: this.balanceMillicents - charged,
        applied: true,
        ...(recordRefused && { usageRecordRefused: '23514: usage_records refused' }),
      };
    });
    const written = this.onBegin();
    try {
      await options.alsoInTransaction?.(this.manager as unknown as EntityManager, settlements);
    } catch (error) {
      written.rollback();
      throw error;
    }
    orders.forEach(({ usageRow }, index) => {
      if (usageRow && !recordRefused) {
        this.usage.records.push({ ...(usageRow as unknown as NewUsageRecord), chargedMillicents: settlements[index].keptMillicents });
      }
    });
    orders.forEach(({ hold, charge, refund }, index) => {
      this.reserved -= hold.amountMillicents;
      if (!refund) this.balanceMillicents -= settlements[index].chargedMillicents;
      this.settled.push({ hold, charge, refund: refund === true, settlement: settlements[index] });
    });
    return settlements;
  }

  async release(hold: Hold): Promise<void> {
    this.released.push(hold.id);
  }
}

class FakeUsage {
  records: NewUsageRecord[] = [];
  refuse = false;
  async insert(record: NewUsageRecord): Promise<void> {
    if (this.refuse) throw new Error('usage_records refused');
    this.records.push(record);
  }
  /** Rows as the records themselves: the fake wallet stores them as they come. */
  row(record: Partial<NewUsageRecord>): Record<string, unknown> {
    return { ...record };
  }
}

class FakeConversations {
  turns: AppendTurnParams[] = [];
  refuse = false;
  async appendTurn(_manager: EntityManager, params: AppendTurnParams) {
    if (this.refuse) throw new Error('conversation_messages refused');
    this.turns.push(params);
    return { messageIds: [], messageCount: params.messages.length, lastMessageAt: new Date() };
  }
}

async function waitFor(condition: () => boolean, timeoutMs: number): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!condition() && Date.now() < deadline) await new Promise((resolve) => setTimeout(resolve, 20));
}

function setUp(balanceMillicents = 100_000) {
  const wallet = new FakeWallet(balanceMillicents);
  const usage = wallet.usage;
  const conversations = new FakeConversations();
  const incidents: BillingIncidents = { conversation_turn_not_stored: 0, usage_record_not_stored: 0, settlement_failed: 0 };
  wallet.onBegin = () => {
    const [records, turns] = [usage.records.length, conversations.turns.length];
    return {
      rollback: () => {
        usage.records.length = records;
        conversations.turns.length = turns;
      },
    };
  };
  const settlements = new SettlementWriter({ wallet, usage, conversations, incident: (kind) => void (incidents[kind] += 1) });
  const ports: BillingPorts = { wallet, settlements, holdTtlMs: TTL_MS, incidents };
  const client = new AbortController();
  const estimate = (fields: Partial<Estimate> = {}): Estimate => ({
    subject: {
      workspaceId: 'ws-1',
      requestId: 'req-1',
      apiKeyId: 'key-1',
      apiKeyName: null,
      assistantId: null,
      model: MODEL.id,
      userId: null,
      subscriptionId: null,
      stream: false,
      source: 'api',
    },
    startedAt: Date.now(),
    clientGone: client.signal,
    model: MODEL,
    promptTokens: 1_000,
    outputCap: 1_000,
    choices: 1,
    tools: [],
    toolPriceMicros: 0n,
    conversation: null,
    ...fields,
  });
  return { wallet, usage, conversations, incidents, ports, client, estimate };
}

/** A widget's daily cap in memory: a reservation of `reserved` that `cover` raises while the cap allows. */
class FakeSpending implements SpendingReservation {
  readonly charges: bigint[] = [];
  constructor(
    public reserved: number,
    private readonly capMillicents: number,
  ) {}
  async cover(total: number): Promise<boolean> {
    if (total <= this.reserved) return true;
    if (total > this.capMillicents) return false;
    this.reserved = total;
    return true;
  }
  settled(charged: bigint): void {
    this.charges.push(charged);
  }
}

/** 1,000 prompt tokens and 1,000 output tokens of gpt-4o: 250 + 1,000 millicents. */
const FULL_HOLD = 1_250;

describe('BillingSession', () => {
  beforeAll(() => Logger.overrideLogger(false));
  afterAll(() => Logger.overrideLogger(['log', 'error', 'warn']));

  describe('opening: the hold', () => {
    it('holds prompt + output cap at the model prices', async () => {
      const { ports, wallet, estimate } = setUp();
      const session = await BillingSession.open(ports, estimate());
      expect(wallet.holds).toEqual([{ id: 'hold-1', workspaceId: 'ws-1', amountMillicents: FULL_HOLD }]);
      expect(session.maxTokens).toBe(1_000);
      await session.settle(REPLY);
    });

    describe("against the key's spending limit", () => {
      /** A key's budget in memory: holds against `limit`, released by id. */
      const fakeKeys = (limit: number) => {
        const held = new Map<string, number>();
        const keys: NonNullable<BillingPorts['keyBudgets']> = {
          reserve: async (budget, amount) => {
            const remaining = limit - [...held.values()].reduce((sum, value) => sum + value, 0);
            if (remaining < amount) return { hold: null, remainingMillicents: remaining };
            const hold = { id: `key-hold-${held.size + 1}`, budget, amountMillicents: amount };
            held.set(hold.id, amount);
            return { hold, remainingMillicents: remaining };
          },
          extend: async (hold, extra) => {
            const remaining = limit - [...held.values()].reduce((sum, value) => sum + value, 0);
            if (remaining < extra) return false;
            held.set(hold.id, held.get(hold.id)! + extra);
            hold.amountMillicents += extra;
            return true;
          },
          keepAlive: async () => undefined,
          release: async (hold) => void held.delete(hold.id),
          held: async () => [...held.values()].reduce((sum, value) => sum + value, 0),
        };
        return { keys, held };
      };
      const budget = { apiKeyId: 'key-1', limitMillicents: 650, period: 'daily' as const };

      it('lowers the output cap to what the key has left, holds both, and releases the key once settled', async () => {
        const { ports, wallet, estimate } = setUp();
        const { keys, held } = fakeKeys(650);
        const session = await BillingSession.open({ ...ports, keyBudgets: keys }, estimate({ keyBudget: budget }));
        expect(session.maxTokens).toBe(400);
        expect(wallet.holds[0].amountMillicents).toBe(650);
        expect([...held.values()]).toEqual([650]);
        await session.settle(REPLY);
        await waitFor(() => held.size === 0, 1_000);
        expect(held.size).toBe(0);
      });

      it('refuses with 402 key_limit_exceeded, what is left and when it starts again, before the wallet is touched', async () => {
        const { ports, wallet, estimate } = setUp();
        const { keys } = fakeKeys(200);
        const refusal = BillingSession.open({ ...ports, keyBudgets: keys }, estimate({ keyBudget: budget }));
        await expect(refusal).rejects.toMatchObject({ status: 402, code: 'key_limit_exceeded', remainingMillicents: 200 });
        const now = new Date();
        const tomorrow = new Date(Date.UTC(now.getUTCFullYear(), now.getUTCMonth(), now.getUTCDate() + 1)).toISOString();
        await expect(refusal).rejects.toThrow(`It starts again at ${tomorrow}`);
        expect(wallet.holds).toEqual([]);
      });

      it('refuses with 429 key_limit_held and Retry-After when requests in flight hold what would cover it', async () => {
        const { ports, estimate } = setUp();
        const { keys } = fakeKeys(650);
        const first = await BillingSession.open({ ...ports, keyBudgets: keys }, estimate({ keyBudget: budget }));
        const refusal = BillingSession.open({ ...ports, keyBudgets: keys }, estimate({ keyBudget: budget }));
        await expect(refusal).rejects.toMatchObject({ status: 429, code: 'key_limit_held', remainingMillicents: 0, headers: { 'Retry-After': '2' } });
        await expect(refusal).rejects.toThrow(/held by its requests in flight \(650 millicents\)/);
        await first.settle(REPLY);
      });

      it("ends a tool loop when the key's limit cannot cover the next iteration, the wallet's hold untouched", async () => {
        const { ports, wallet, estimate } = setUp();
        const { keys, held } = fakeKeys(2_000);
        const session = await BillingSession.open({ ...ports, keyBudgets: keys }, estimate({ keyBudget: budget, toolPriceMicros: 1_000_000_000n }));
        await session.meter(PROMPT, { prompt_tokens: 1_000, completion_tokens: 20, total_tokens: 1_020 }, '');
        expect(await session.holdNextIteration(PROMPT, 1)).toBe('key');
        expect(wallet.holds[0].amountMillicents).toBe(FULL_HOLD);
        expect([...held.values()]).toEqual([FULL_HOLD]);
        await session.settle(REPLY);
      });

      it("gives the key's hold back when the wallet refuses", async () => {
        const { ports, estimate } = setUp(100);
        const { keys, held } = fakeKeys(10_000);
        await expect(BillingSession.open({ ...ports, keyBudgets: keys }, estimate({ keyBudget: budget }))).rejects.toMatchObject({ code: 'insufficient_balance' });
        expect(held.size).toBe(0);
      });
    });

    it('lowers the output cap to what the wallet affords', async () => {
      const { ports, wallet, estimate } = setUp(650);
      const session = await BillingSession.open(ports, estimate());
      // 650 - 250 for the prompt leaves 400 output tokens at 1 millicent each.
      expect(session.maxTokens).toBe(400);
      expect(wallet.holds[0].amountMillicents).toBe(650);
      await session.settle(REPLY);
    });

    it('refuses with 402 below a useful minimum, holding nothing', async () => {
      const { ports, wallet, estimate } = setUp(255);
      const refusal = await BillingSession.open(ports, estimate()).catch((error: unknown) => error);
      expect(refusal).toBeInstanceOf(ApiError);
      expect(refusal).toMatchObject({ status: 402, code: 'insufficient_balance' });
      expect(wallet.holds).toEqual([]);
      expect(wallet.reserved).toBe(0);
    });

    it('keeps the hold alive while the request runs, and stops at its settlement', async () => {
      jest.useFakeTimers();
      try {
        const { ports, wallet, estimate } = setUp();
        const session = await BillingSession.open(ports, estimate());
        jest.advanceTimersByTime(TTL_MS);
        expect(wallet.kept).toBe(3);
        await session.settle(REPLY);
        jest.advanceTimersByTime(TTL_MS);
        expect(wallet.kept).toBe(3);
      } finally {
        jest.useRealTimers();
      }
    });
  });

  describe('telling the nerfing counters what was charged', () => {
    it('passes the tokens and the exact cost of a charge, once it committed', async () => {
      const { ports, estimate } = setUp();
      const charged: [number, bigint][] = [];
      const session = await BillingSession.open(ports, estimate({ onCharged: (tokens, micros) => charged.push([tokens, micros]) }));
      await session.meter(PROMPT, { prompt_tokens: 1_000, completion_tokens: 20, total_tokens: 1_020 }, '');
      expect(charged).toEqual([]);
      await session.settle(REPLY);
      // 1,000 input tokens at 250,000 and 20 output tokens at 1,000,000 millicents per million: 270 millicents.
      expect(charged).toEqual([[1_020, 270_000_000n]]);
    });

    it('passes nothing for a failure that is refunded', async () => {
      const { ports, estimate } = setUp();
      const charged: unknown[] = [];
      const session = await BillingSession.open(ports, estimate({ onCharged: (...args) => charged.push(args) }));
      await session.meter(PROMPT, { prompt_tokens: 1_000, completion_tokens: 20, total_tokens: 1_020 }, '');
      await session.fail(new ApiError('upstream_error', 'Upstream broke.'));
      expect(charged).toEqual([]);
    });
  });

  describe('extension before each further iteration', () => {
    it('raises the hold to cover what is spent, the tool calls and the next call', async () => {
      const { ports, wallet, estimate } = setUp();
      const session = await BillingSession.open(ports, estimate({ toolPriceMicros: 1_000_000_000n }));
      await session.meter(PROMPT, { prompt_tokens: 1_000, completion_tokens: 20, total_tokens: 1_020 }, '');
      expect(await session.holdNextIteration(PROMPT, 2)).toBe(true);
      // Spent 270; two tool calls at 1,000; the next prompt (the messages + 1,500 tokens per result) and 1,000 output tokens.
      const nextPrompt = (await countPromptTokensAsync(PROMPT)) + 2 * 1_500;
      expect(wallet.holds[0].amountMillicents).toBe(270 + 2_000 + Math.ceil((nextPrompt * MODEL.inputPrice) / 1e6) + 1_000);
      await session.settle(REPLY);
      expect(wallet.reserved).toBe(0);
    });

    it("answers 'wallet' when the wallet cannot cover it, leaving the hold as it was", async () => {
      const { ports, wallet, estimate } = setUp(2_000);
      const session = await BillingSession.open(ports, estimate({ toolPriceMicros: 1_000_000_000n }));
      await session.meter(PROMPT, { prompt_tokens: 1_000, completion_tokens: 20, total_tokens: 1_020 }, '');
      expect(await session.holdNextIteration(PROMPT, 1)).toBe('wallet');
      expect(wallet.holds[0].amountMillicents).toBe(FULL_HOLD);
      await session.settle(REPLY);
    });

    it("raises the widget's reservation first, answers 'widget' when its cap cannot cover it, and settles the whole reservation once", async () => {
      const { ports, wallet, estimate } = setUp();
      const spending = new FakeSpending(FULL_HOLD, 3_000);
      const session = await BillingSession.open(ports, estimate({ toolPriceMicros: 1_000_000_000n, spending }));
      await session.meter(PROMPT, { prompt_tokens: 1_000, completion_tokens: 20, total_tokens: 1_020 }, '');
      // Spent 270, 1,000 a search, and the next call (1,000 output tokens, 1,500 prompt tokens a result): one search fits in 3,000, two do not.
      expect(await session.holdNextIteration(PROMPT, 2)).toBe('widget');
      expect(spending.reserved).toBe(FULL_HOLD);
      expect(wallet.holds[0].amountMillicents).toBe(FULL_HOLD);
      expect(await session.holdNextIteration(PROMPT, 1)).toBe(true);
      expect(spending.reserved).toBe(wallet.holds[0].amountMillicents);
      expect(spending.reserved).toBeLessThanOrEqual(3_000);
      await session.settle(REPLY);
      expect(spending.charges).toEqual([270_000_000n]);
    });

    it("covers the next call as it will be sent once the tools' results are in, when they are longer than assumed", async () => {
      const { ports, wallet, estimate } = setUp();
      const spending = new FakeSpending(FULL_HOLD, 5_000);
      const session = await BillingSession.open(ports, estimate({ toolPriceMicros: 1_000_000_000n, spending }));
      await session.meter(PROMPT, { prompt_tokens: 1_000, completion_tokens: 20, total_tokens: 1_020 }, '');
      expect(await session.holdNextIteration(PROMPT, 1)).toBe(true);
      const assumed = wallet.holds[0].amountMillicents;
      session.addToolCall('web_search', 1_000_000_000n);
      // A short result: what was held covers the call.
      const short: ChatMessage[] = [...PROMPT, { role: 'tool', tool_call_id: 'c1', content: 'Sunny.' }];
      expect(await session.holdNextCall(short, 1_000)).toBe(true);
      expect(wallet.holds[0].amountMillicents).toBe(assumed);
      // A result of about 6,000 tokens, four times what was assumed: every hold is raised to the exact call.
      const long: ChatMessage[] = [...PROMPT, { role: 'tool', tool_call_id: 'c1', content: 'sunny '.repeat(6_000) }];
      expect(await session.holdNextCall(long, 1_000)).toBe(true);
      const exact = 270 + 1_000 + Math.ceil(((await countPromptTokensAsync(long)) * MODEL.inputPrice) / 1e6) + 1_000;
      expect(wallet.holds[0].amountMillicents).toBe(exact);
      expect(spending.reserved).toBe(exact);
      // Twice that result: more than the widget's cap covers.
      const longer: ChatMessage[] = [...PROMPT, { role: 'tool', tool_call_id: 'c1', content: 'sunny '.repeat(12_000) }];
      expect(await session.holdNextCall(longer, 1_000)).toBe('widget');
      expect(spending.reserved).toBe(exact);
      await session.settle(REPLY);
      expect(spending.charges).toEqual([1_270_000_000n]);
    });
  });

  describe('settlement', () => {
    it('charges the exact cost with its usage record and conversation turn', async () => {
      const { ports, wallet, usage, conversations, estimate } = setUp();
      const session = await BillingSession.open(ports, estimate({ conversation: { id: 'conv-1', messages: PROMPT } }));
      await session.meter(PROMPT, { prompt_tokens: 1_000, completion_tokens: 100, total_tokens: 1_100 }, 'Sunny.');
      session.addToolCall('web_search', 2_500_000n);
      // The router's account of the call: the second deployment answered after the first failed.
      session.spend.answeredBy = { model: MODEL.id, provider: 'openai', deployment: 'openai-b' };
      session.spend.attempts = 2;
      await session.settle(REPLY);

      expect(wallet.settled).toHaveLength(1);
      expect(wallet.settled[0]).toMatchObject({ refund: false, charge: { workspaceId: 'ws-1', costMicros: 352_500_000n } });
      expect(wallet.settled[0].charge.description).toBe('gpt-4o: 1000 input + 100 output tokens, web_search');
      expect(usage.records).toEqual([
        expect.objectContaining({
          requestId: 'req-1',
          status: 'success',
          errorCode: null,
          inputTokens: 1_000,
          outputTokens: 100,
          totalTokens: 1_100,
          llmCostMillicents: 350,
          toolCostMillicents: 2.5,
          totalCostMillicents: 352.5,
          chargedMillicents: 353,
          toolsUsed: ['web_search'],
          iterations: 1,
          provider: 'openai',
          deployment: 'openai-b',
          attempts: 2,
        }),
      ]);
      expect(conversations.turns).toEqual([
        expect.objectContaining({ conversationId: 'conv-1', inputTokens: 1_000, outputTokens: 100, costMillicents: '352.500000' }),
      ]);
      expect(conversations.turns[0].messages.map((message) => message.role)).toEqual(['user', 'assistant']);
      expect(wallet.reserved).toBe(0);
    });

    it('still commits the charge when its usage record cannot be stored, and counts the incident', async () => {
      const { ports, wallet, usage, incidents, estimate } = setUp();
      const session = await BillingSession.open(ports, estimate());
      await session.meter(PROMPT, { prompt_tokens: 1_000, completion_tokens: 100, total_tokens: 1_100 }, 'Sunny.');
      usage.refuse = true;
      await session.settle(REPLY);
      expect(wallet.settled).toHaveLength(1);
      expect(wallet.balanceMillicents).toBe(100_000 - 350);
      expect(incidents.usage_record_not_stored).toBe(1);
      expect(usage.records).toEqual([]);
    });

    it('still commits the charge when the conversation turn cannot be stored, and counts the incident', async () => {
      const { ports, wallet, usage, conversations, incidents, estimate } = setUp();
      const session = await BillingSession.open(ports, estimate({ conversation: { id: 'conv-1', messages: PROMPT } }));
      await session.meter(PROMPT, { prompt_tokens: 1_000, completion_tokens: 100, total_tokens: 1_100 }, 'Sunny.');
      conversations.refuse = true;
      await session.settle(REPLY);
      expect(wallet.settled).toHaveLength(1);
      expect(usage.records).toHaveLength(1);
      expect(incidents.conversation_turn_not_stored).toBe(1);
    });

    it('keeps the settlement of a delivered stream that cannot be written now, ends the stream without an error, and charges it once later', async () => {
      const { ports, wallet, usage, incidents, estimate } = setUp();
      const session = await BillingSession.open(ports, estimate({ conversation: { id: 'conv-1', messages: PROMPT } }));
      await session.meter(PROMPT, { prompt_tokens: 1_000, completion_tokens: 100, total_tokens: 1_100 }, 'Sunny.');
      // The database is gone for the writer's first try and its first retry (500 ms later).
      wallet.failingSettlements = 2;
      await session.settleStream(undefined, REPLY, true);
      expect(wallet.settled).toEqual([]);
      await waitFor(() => wallet.settled.length > 0, 8_000);
      expect(wallet.settled).toEqual([expect.objectContaining({ refund: false })]);
      expect(usage.records).toEqual([expect.objectContaining({ status: 'success' })]);
      expect(incidents.settlement_failed).toBe(0);
      expect(wallet.released).toEqual([]);
    }, 15_000);

    it('keeps its own hold alive while a delivered stream\'s settlement waits for the database, longer than the hold lives, until it commits', async () => {
      jest.useFakeTimers();
      try {
        const { ports, wallet, estimate } = setUp();
        const session = await BillingSession.open(ports, estimate());
        await session.meter(PROMPT, { prompt_tokens: 1_000, completion_tokens: 100, total_tokens: 1_100 }, 'Sunny.');
        // The database is gone for the first tries, over three times the hold's life.
        wallet.failingSettlements = 1_000;
        await session.settleStream(undefined, REPLY, true);
        const before = wallet.kept;
        await jest.advanceTimersByTimeAsync(3 * TTL_MS);
        expect(wallet.settled).toEqual([]);
        // Its heartbeat goes on (every third of the hold's life), so the sweeper never takes the hold meanwhile.
        expect(wallet.kept - before).toBeGreaterThanOrEqual(8);
        wallet.failingSettlements = 0;
        await jest.advanceTimersByTimeAsync(30_000); // the next retry: commits
        expect(wallet.settled).toEqual([expect.objectContaining({ refund: false })]);
        const after = wallet.kept;
        await jest.advanceTimersByTimeAsync(TTL_MS);
        expect(wallet.kept).toBe(after);
      } finally {
        jest.useRealTimers();
      }
    });

    it('charges what a stalled stream delivered, then ends it with the stall', async () => {
      const { ports, wallet, usage, estimate } = setUp();
      const session = await BillingSession.open(ports, estimate());
      await session.meter(PROMPT, undefined, 'Once upon a time');
      const stall = new ApiError('upstream_timeout', 'stalled', { code: 'upstream_idle_timeout' });
      await expect(session.settleStream(stall, REPLY, true)).rejects.toBe(stall);
      expect(wallet.settled).toEqual([expect.objectContaining({ refund: false })]);
      expect(usage.records).toEqual([expect.objectContaining({ status: 'error', errorCode: 'upstream_idle_timeout' })]);
      expect(usage.records[0].outputTokens).toBeGreaterThanOrEqual(4);
    });
  });

  describe('failure of a stream', () => {
    it('charges what reached the client before an upstream failure, refunds nothing, and records the failure with its partial counts', async () => {
      const { ports, wallet, usage, estimate } = setUp();
      const session = await BillingSession.open(ports, estimate());
      await session.meter(PROMPT, { prompt_tokens: 1_000, completion_tokens: 20, total_tokens: 1_020 }, 'Looking it up.');
      session.addToolCall('web_search', 1_000_000_000n);
      // The second iteration broke after three words, without a usage report: its text is counted.
      await session.meter(PROMPT, undefined, 'It is sunny');
      const broken = new ApiError('upstream_error', 'The provider failed mid-answer.');
      await expect(session.settleStream(broken, REPLY, true)).rejects.toBe(broken);
      expect(wallet.settled).toEqual([expect.objectContaining({ refund: false })]);
      const [record] = usage.records;
      expect(record).toMatchObject({ status: 'error', errorCode: 'upstream_error', iterations: 2, toolsUsed: ['web_search'], toolCostMillicents: 1_000 });
      expect(record.outputTokens).toBeGreaterThanOrEqual(23);
      expect(record.chargedMillicents).toBe(Math.ceil(record.totalCostMillicents));
      expect(wallet.balanceMillicents).toBe(100_000 - record.chargedMillicents);
    });

    it('refunds a stream that failed before anything reached the client', async () => {
      const { ports, wallet, usage, estimate } = setUp();
      const session = await BillingSession.open(ports, estimate());
      await session.meter(PROMPT, { prompt_tokens: 1_000, completion_tokens: 20, total_tokens: 1_020 }, '');
      const refused = new ApiError('upstream_error', 'The provider failed.');
      await expect(session.settleStream(refused, undefined, false)).rejects.toBe(refused);
      expect(wallet.settled).toEqual([expect.objectContaining({ refund: true })]);
      expect(wallet.balanceMillicents).toBe(100_000);
      expect(usage.records).toEqual([expect.objectContaining({ status: 'error', errorCode: 'upstream_error', chargedMillicents: 0 })]);
    });

    it('records a lost database as database_unavailable', async () => {
      const { ports, usage, estimate } = setUp();
      const session = await BillingSession.open(ports, estimate());
      await session.meter(PROMPT, { prompt_tokens: 1_000, completion_tokens: 20, total_tokens: 1_020 }, 'Sunny');
      const lost = Object.assign(new Error('connect ECONNREFUSED 127.0.0.1:5432'), { code: 'ECONNREFUSED' });
      await expect(session.settleStream(lost, REPLY, true)).rejects.toBe(lost);
      expect(usage.records).toEqual([expect.objectContaining({ status: 'error', errorCode: 'database_unavailable' })]);
    });
  });

  describe('failure', () => {
    it('charges and refunds what a failed request used, records the failure, and answers with its error', async () => {
      const { ports, wallet, usage, estimate } = setUp();
      const session = await BillingSession.open(ports, estimate());
      await session.meter(PROMPT, { prompt_tokens: 1_000, completion_tokens: 20, total_tokens: 1_020 }, '');
      const upstream = new ApiError('upstream_error', 'The provider failed.');
      expect(await session.fail(upstream)).toBe(upstream);
      expect(wallet.settled).toEqual([expect.objectContaining({ refund: true })]);
      expect(wallet.balanceMillicents).toBe(100_000);
      expect(wallet.reserved).toBe(0);
      expect(usage.records).toEqual([expect.objectContaining({ status: 'error', errorCode: 'upstream_error', chargedMillicents: 0, inputTokens: 1_000 })]);
    });

    it('records our own failure as internal_error and hands it back as it was', async () => {
      const { ports, usage, estimate } = setUp();
      const session = await BillingSession.open(ports, estimate());
      const bug = new TypeError('undefined is not a function');
      expect(await session.fail(bug)).toBe(bug);
      expect(usage.records).toEqual([expect.objectContaining({ status: 'error', errorCode: 'internal_error', iterations: 1 })]);
    });

    it('releases the hold and counts the incident when the failure cannot be settled either', async () => {
      const { ports, wallet, incidents, estimate } = setUp();
      const session = await BillingSession.open(ports, estimate());
      // The writer's first try, and its careful second.
      wallet.failingSettlements = 2;
      const upstream = new ApiError('upstream_error', 'The provider failed.');
      expect(await session.fail(upstream)).toBe(upstream);
      expect(wallet.released).toEqual(['hold-1']);
      expect(incidents.settlement_failed).toBe(1);
    });

    it.each(['fail', 'settleStream'] as const)('charges the prompt sent upstream when the client left mid-call (%s)', async (end) => {
      const { ports, wallet, usage, client, estimate } = setUp();
      const session = await BillingSession.open(ports, estimate());
      session.calling(PROMPT);
      client.abort();
      const abort = Object.assign(new Error('Request was aborted.'), { name: 'AbortError' });
      if (end === 'fail') {
        expect(await session.fail(abort)).toMatchObject({ code: 'client_disconnected' });
      } else {
        await session.settleStream(abort, undefined, false);
      }
      expect(wallet.settled).toEqual([expect.objectContaining({ refund: false })]);
      expect(wallet.settled[0].charge.costMicros).toBeGreaterThan(0n);
      expect(usage.records).toEqual([expect.objectContaining({ status: 'error', errorCode: 'client_disconnected', outputTokens: 0 })]);
      expect(usage.records[0].inputTokens).toBeGreaterThan(0);
      expect(usage.records[0].chargedMillicents).toBeGreaterThan(0);
    });
  });

  describe('metering', () => {
    it('bills our own counts when the provider reports no usage, and clamps a report above the limits', async () => {
      const { ports, estimate } = setUp();
      const session = await BillingSession.open(ports, estimate());
      await session.meter(PROMPT, undefined, 'It is sunny in Paris today.');
      expect(session.spend.tokens.inputTokens).toBeGreaterThan(0);
      expect(session.spend.tokens.outputTokens).toBeGreaterThan(3);
      await session.meter(PROMPT, { prompt_tokens: 10_000_000, completion_tokens: 5_000, total_tokens: 10_005_000 }, '');
      expect(session.spend.tokens.inputTokens).toBeLessThanOrEqual(MODEL.contextLength + 1_000);
      expect(session.spend.iterations).toBe(2);
      await session.settle(REPLY);
    });
  });
});

describe('Billing.recordRefused', () => {
  beforeAll(() => Logger.overrideLogger(false));
  afterAll(() => Logger.overrideLogger(['log', 'error', 'warn']));

  const subject = {
    workspaceId: 'ws-1',
    requestId: 'req-2',
    apiKeyId: 'key-1',
    apiKeyName: null,
    assistantId: null,
    model: 'gpt-4o',
    userId: 'user-7',
    subscriptionId: null,
    stream: true,
    source: 'api' as const,
  };

  it('records a refused request with nothing used and the refusal code, and never charges it', async () => {
    const { wallet, usage, conversations } = setUp();
    const billing = new Billing({ holdTtlMs: TTL_MS } as AppConfig, undefined as never, wallet as never, usage as never, conversations as never, new PendingSettlements());
    await billing.recordRefused(subject, 12, new ApiError('insufficient_balance', 'Top up.'));
    expect(usage.records).toEqual([
      {
        ...subject,
        inputTokens: 0,
        outputTokens: 0,
        totalTokens: 0,
        cachedTokens: 0,
        llmCostMillicents: 0,
        toolCostMillicents: 0,
        totalCostMillicents: 0,
        chargedMillicents: 0,
        toolsUsed: [],
        iterations: 0,
        provider: null,
        deployment: null,
        attempts: 0,
        nerfing: [],
        latencyMs: 12,
        status: 'error',
        errorCode: 'insufficient_balance',
      },
    ]);
    expect(wallet.settled).toEqual([]);
  });

  it('does not throw when the record cannot be written', async () => {
    const { wallet, usage, conversations } = setUp();
    usage.refuse = true;
    const billing = new Billing({ holdTtlMs: TTL_MS } as AppConfig, undefined as never, wallet as never, usage as never, conversations as never, new PendingSettlements());
    await expect(billing.recordRefused(subject, 0, new Error('boom'))).resolves.toBeUndefined();
  });
});
