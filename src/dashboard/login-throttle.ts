import { Injectable } from '@nestjs/common';
import { sha256 } from '../accounts/link-secrets';
import { ApiError } from '../common/errors/api-error';
import type { ApiRequest } from '../common/http/request-context';
import { clientAddressTracker, RateLimitService } from '../limits/rate-limit.service';

const WINDOW_MS = 15 * 60_000;
/** Attempts per address: enough for an office behind one NAT, too few to guess passwords. */
const PER_ADDRESS = 30;
/** Attempts per account (email), from anywhere: slows a distributed guess at one account. */
const PER_ACCOUNT = 10;

/**
 * Limits sign-in (and reset) attempts per client address and per email, counted in the
 * rate-limit storage (Redis with several replicas). The email is counted whether or not
 * an account has it, so the answer never tells which addresses exist.
 */
@Injectable()
export class LoginThrottle {
  constructor(private readonly rateLimits: RateLimitService) {}

  async check(req: ApiRequest, action: 'login' | 'reset' | 'signup', email: string): Promise<void> {
    const account = sha256(String(email).trim().toLowerCase());
    const [byAddress, byAccount] = await Promise.all([
      this.rateLimits.countAttempt(`${action}:${clientAddressTracker(req)}`, PER_ADDRESS, WINDOW_MS),
      this.rateLimits.countAttempt(`${action}:account:${account}`, PER_ACCOUNT, WINDOW_MS),
    ]);
    const wait = Math.max(byAddress, byAccount);
    if (wait > 0) {
      const minutes = Math.ceil(wait / 60);
      throw ApiError.rateLimited(`Too many attempts. Try again in ${minutes} minute${minutes === 1 ? '' : 's'}.`, wait);
    }
  }
}
