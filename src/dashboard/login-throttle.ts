import { Injectable } from '@nestjs/common';
import { AccountsService } from '../accounts/accounts.service';
import { sha256 } from '../accounts/link-secrets';
import { ApiError } from '../common/errors/api-error';
import type { ApiRequest } from '../common/http/request-context';
import { clientAddressTracker, RateLimitService } from '../limits/rate-limit.service';

export type ThrottledAction = 'login' | 'reset' | 'signup';

interface Limit {
  attempts: number;
  windowMs: number;
}

interface ActionLimits {
  /** Per client address, whatever the emails: one address spraying many accounts. */
  address: Limit;
  /** Per email and client address: guessing one account's password from one place. */
  accountAddress: Limit;
  /** Per email from anywhere: slow, distributed guessing; high, so a third party cannot cheaply lock the owner out. */
  account: Limit;
}

const MINUTE = 60_000;

/**
 * The limits of each action. The tight one is per (email, address), so the owner signing in
 * from their own address is not stopped by someone else's failures elsewhere; the per-email
 * one is only for guessing spread over many addresses. A reset request's per-email limit
 * bounds the mail an address can be sent: whoever exhausts it has only sent the owner links
 * that work.
 */
export const THROTTLE_LIMITS: Record<ThrottledAction, ActionLimits> = {
  login: {
    address: { attempts: 30, windowMs: 15 * MINUTE },
    // Every attempt counts, successes too (a person signing in from a few browsers): 10, as the old per-account limit was.
    accountAddress: { attempts: 10, windowMs: 15 * MINUTE },
    account: { attempts: 100, windowMs: 60 * MINUTE },
  },
  reset: {
    address: { attempts: 30, windowMs: 15 * MINUTE },
    accountAddress: { attempts: 5, windowMs: 15 * MINUTE },
    account: { attempts: 10, windowMs: 60 * MINUTE },
  },
  signup: {
    address: { attempts: 30, windowMs: 15 * MINUTE },
    accountAddress: { attempts: 10, windowMs: 15 * MINUTE },
    account: { attempts: 10, windowMs: 15 * MINUTE },
  },
};

/**
 * Limits sign-in, reset and sign-up attempts per client address, per (email, address) and per
 * email, counted in the rate-limit storage (Redis with several replicas). The email is counted
 * whether or not an account has it, so the answer never tells which addresses exist. An
 * account's windows are named after the moment its password was last set, so a password reset
 * (on any replica) opens fresh ones: the reset clears the throttle without deleting counters.
 */
@Injectable()
export class LoginThrottle {
  constructor(
    private readonly rateLimits: RateLimitService,
    private readonly accounts: AccountsService,
  ) {}

  async check(req: ApiRequest, action: ThrottledAction, email: string): Promise<void> {
    const limits = THROTTLE_LIMITS[action];
    const epoch = action === 'signup' ? null : await this.accounts.passwordEpoch(email);
    const account = `${sha256(String(email).trim().toLowerCase())}${epoch === null ? '' : `:${epoch}`}`;
    const address = clientAddressTracker(req);
    const waits = await Promise.all([
      this.rateLimits.countAttempt(`${action}:${address}`, limits.address.attempts, limits.address.windowMs),
      this.rateLimits.countAttempt(`${action}:account:${account}:${address}`, limits.accountAddress.attempts, limits.accountAddress.windowMs),
      this.rateLimits.countAttempt(`${action}:account:${account}`, limits.account.attempts, limits.account.windowMs),
    ]);
    const wait = Math.max(...waits);
    if (wait > 0) {
      const minutes = Math.ceil(wait / 60);
      const after = `Try again in ${minutes} minute${minutes === 1 ? '' : 's'}`;
      // The way out for an owner someone else has throttled: a reset link works meanwhile, and starts afresh.
      throw ApiError.rateLimited(`Too many attempts. ${after}${action === 'login' ? ', or reset your password' : ''}.`, wait);
    }
  }
}
