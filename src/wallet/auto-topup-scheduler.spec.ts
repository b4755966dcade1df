import { Subject } from 'rxjs';
import { PaymentEvents } from '../payments/payment-events';
import type { PaymentProvider } from '../payments/payment-provider';
import type { AttemptRow, AutoTopupAttempts } from './auto-topup-attempts';
import { AutoTopupScheduler } from './auto-topup-scheduler';
import type { WalletService } from './wallet.service';

const claimed = { id: 'attempt-1' } as AttemptRow;

/** The trigger alone: when a check runs, with the claim and payment (AutoTopupAttempts.topUpIfNeeded) replaced. */
function setup(provider: Partial<PaymentProvider> | null = { name: 'simulated' }) {
  const charges = new Subject<string>();
  const paymentEvents = new PaymentEvents();
  const checks: Array<{ workspaceId: string; finish: (result: AttemptRow | null) => void }> = [];
  const attempts = {
    topUpIfNeeded: jest.fn(
      (workspaceId: string) => new Promise<AttemptRow | null>((resolve) => checks.push({ workspaceId, finish: resolve })),
    ),
  };
  const service = new AutoTopupScheduler(
    attempts as unknown as AutoTopupAttempts,
    {} as never,
    { charges } as unknown as WalletService,
    paymentEvents,
    provider as PaymentProvider | null,
  );
  service.onModuleInit();
  return { service, attempts, charges, checks, paymentEvents };
}

const settle = () => new Promise((resolve) => setImmediate(resolve));

describe('AutoTopupScheduler: the trigger after a charge', () => {
  it('checks after each charge the wallet announces', async () => {
    const { service, charges, checks } = setup();
    charges.next('ws-1');
    expect(checks.map((c) => c.workspaceId)).toEqual(['ws-1']);
    checks[0].finish(null);
    await service.idle();
  });

  it('runs one check per workspace at a time; charges during a check that claims a top-up start nothing more', async () => {
    const { service, charges, checks } = setup();
    charges.next('ws-1');
    service.afterCharge('ws-1'); // the same charge, reported again by a caller
    charges.next('ws-1');
    charges.next('ws-2');
    expect(checks.map((c) => c.workspaceId)).toEqual(['ws-1', 'ws-2']);
    checks[0].finish(claimed);
    checks[1].finish(null);
    await service.idle();
    expect(checks).toHaveLength(2);
  });

  it('checks once more when charges came during a check that found nothing due', async () => {
    const { service, charges, checks } = setup();
    charges.next('ws-1');
    charges.next('ws-1');
    charges.next('ws-1');
    checks[0].finish(null);
    await settle();
    expect(checks).toHaveLength(2);
    checks[1].finish(null);
    await service.idle();
    expect(checks).toHaveLength(2);
    // Idle again: the next charge starts a new check.
    charges.next('ws-1');
    expect(checks).toHaveLength(3);
    checks[2].finish(null);
    await service.idle();
  });

  it('logs a failed check, and the next charge checks again', async () => {
    const { service, attempts, charges, checks } = setup();
    (service as unknown as { logger: { error: jest.Mock } }).logger.error = jest.fn();
    attempts.topUpIfNeeded.mockRejectedValueOnce(new Error('database down'));
    charges.next('ws-1');
    await service.idle();
    charges.next('ws-1');
    expect(checks).toHaveLength(1);
    checks[0].finish(null);
    await service.idle();
  });

  it('does nothing without a payment provider', () => {
    const { charges, checks } = setup(null);
    charges.next('ws-1');
    expect(checks).toEqual([]);
  });

  it('stops listening when the module is destroyed', async () => {
    const { service, charges, checks } = setup();
    await service.onModuleDestroy();
    charges.next('ws-1');
    expect(checks).toEqual([]);
  });

  it("handles the payment providers' webhook events", async () => {
    const { service, paymentEvents } = setup();
    const apply = jest.spyOn(service, 'applyPaymentEvent').mockResolvedValue('ignored');
    const event = { paymentId: 'pi_1', outcome: { status: 'pending' as const, paymentId: 'pi_1' } };
    await expect(paymentEvents.deliver('stripe', event)).resolves.toBe('ignored');
    expect(apply).toHaveBeenCalledWith('stripe', event);
  });
});
