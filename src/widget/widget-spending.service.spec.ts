import { Logger } from '@nestjs/common';
import type { DataSource } from 'typeorm';
import type { MailService } from '../mail/mail.service';
import type { Widget } from './entities/widget.entity';
import { WidgetSpendingService } from './widget-spending.service';

const WIDGET = { id: '00000000-0000-4000-8000-000000000001', publicId: 'wgt_test', workspaceId: 'ws', title: 'Help', dailyCapMillicents: 100_000 } as Widget;
const MICROS = 1_000_000n;

/** A database whose settling UPDATE fails `failures` times (the database away), then answers. */
function fakeDatabase(failures: number) {
  const settles: unknown[][] = [];
  let left = failures;
  const query = jest.fn(async (sql: string, params: unknown[] = []) => {
    if (sql.includes('INSERT INTO widget_spending AS s (widget_id, day, reserved_millicents')) return [1];
    if (sql.includes('UPDATE widget_spending SET reserved_millicents')) {
      if (left-- > 0) throw new Error('connect ECONNREFUSED 127.0.0.1:5432');
      settles.push(params);
      return [[], 1];
    }
    if (sql.includes('SET alerted_at')) return [[{ spent: 90_000 }], 1];
    if (sql.includes('FROM memberships')) return [{ email: 'owner@example.com' }];
    throw new Error(`unexpected statement ${sql}`);
  });
  return { db: { query } as unknown as DataSource, settles };
}

async function until(condition: () => boolean): Promise<void> {
  for (let i = 0; i < 500 && !condition(); i++) await new Promise((resolve) => setTimeout(resolve, 5));
}

describe('widget spending settlement', () => {
  let errors: jest.SpyInstance;
  let warnings: jest.SpyInstance;
  beforeEach(() => {
    errors = jest.spyOn(Logger.prototype, 'error').mockImplementation(() => undefined);
    warnings = jest.spyOn(Logger.prototype, 'warn').mockImplementation(() => undefined);
    jest.spyOn(Logger.prototype, 'log').mockImplementation(() => undefined);
  });
  afterEach(() => jest.restoreAllMocks());

  it('moves the reservation to spent once the database answers again after a blip', async () => {
    const { db, settles } = fakeDatabase(3);
    const service = new WidgetSpendingService(db, { send: jest.fn(async () => undefined) } as unknown as MailService);
    service.settleRetry = { minMs: 1, maxMs: 4, tries: 16 };
    const admission = await service.admit(WIDGET, 5_000);
    admission.settled(1_234n * MICROS);
    admission.settled(1_234n * MICROS); // once only
    await until(() => settles.length > 0);
    await new Promise((resolve) => setTimeout(resolve, 30));
    expect(settles).toHaveLength(1);
    expect(settles[0].slice(2)).toEqual([5_000, 1_234]);
    expect(errors).not.toHaveBeenCalled();
  });

  it('gives up after the bounded number of tries, saying the reservation keeps counting', async () => {
    const { db, settles } = fakeDatabase(Number.MAX_SAFE_INTEGER);
    const service = new WidgetSpendingService(db, { send: jest.fn() } as unknown as MailService);
    service.settleRetry = { minMs: 1, maxMs: 2, tries: 5 };
    const admission = await service.admit(WIDGET, 5_000);
    admission.settled(10n * MICROS);
    await until(() => errors.mock.calls.length > 0);
    const updates = (db.query as jest.Mock).mock.calls.filter(([sql]: [string]) => sql.startsWith('UPDATE widget_spending SET reserved_millicents'));
    expect(updates).toHaveLength(5);
    expect(settles).toHaveLength(0);
    expect(String(errors.mock.calls[0][0])).toMatch(/after 5 attempts.*counts until the day ends/);
  });

  it('logs a failed alert mail as such, not as a settlement that failed, and never throws from settled()', async () => {
    const { db, settles } = fakeDatabase(0);
    const send = jest.fn(async () => {
      throw new Error('SMTP down');
    });
    const service = new WidgetSpendingService(db, { send } as unknown as MailService);
    const admission = await service.admit(WIDGET, 5_000);
    expect(() => admission.settled(90_000n * MICROS)).not.toThrow();
    await until(() => warnings.mock.calls.length > 0);
    expect(settles).toHaveLength(1);
    expect(send).toHaveBeenCalled();
    expect(String(warnings.mock.calls[0][0])).toMatch(/Could not alert the owners of widget wgt_test/);
    expect(errors).not.toHaveBeenCalled();
  });
});
