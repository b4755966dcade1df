import * as path from 'node:path';
import { TIER_NAMES, TierName } from '../common/tier-name';
import { WEB_SEARCH_PROVIDERS, webSearchConfigProblems } from './web-search-config';

export type SimulatorMode = 'auto' | 'on' | 'off';

/**
 * The upstream providers, each with the prefix of its variables: `<PREFIX>_API_KEY` and
 * `<PREFIX>_BASE_URL` (a contract: ARCHITECTURE section 7). The catalog's provider names are
 * these and `simulator`; each has an entry in `providers/provider-registry.ts`, which builds its adapter.
 */
export const UPSTREAM_PROVIDERS = [
  ['openai', 'OPENAI'],
  ['anthropic', 'ANTHROPIC'],
  ['google', 'GEMINI'],
] as const;

export type UpstreamProviderName = (typeof UPSTREAM_PROVIDERS)[number][0];

export interface UpstreamConfig {
  apiKey?: string;
  /** Another server speaking the provider's API (a proxy, an OpenAI-compatible server); the provider's own when unset. */
  baseUrl?: string;
}

/** The service's configuration, read once from the environment and validated as a whole. */
export interface AppConfig {
  nodeEnv: string;
  production: boolean;
  port: number;
  host: string;
  /** PostgreSQL URL; undefined means the embedded PostgreSQL under `dataDir`. */
  databaseUrl?: string;
  dataDir: string;
  redisUrl?: string;
  /** Maximum JSON body size, in the `bytes` package's notation (`10mb`). */
  bodyLimit: string;
  /**
   * Express's `trust proxy`: which proxies may tell the client address (X-Forwarded-For),
   * which the per-address rate limit counts by. `false`, `true`, a hop count, or addresses.
   */
  trustProxy: boolean | number | string;
  /** Requests per minute for callers without a valid key, counted per client address. */
  anonymousRateLimitRpm: number;
  /** Key and address of each upstream provider; one without an API key is not configured. */
  providers: Record<UpstreamProviderName, UpstreamConfig>;
  modelCatalogFile?: string;
  llmSimulator: SimulatorMode;
  /** Pause between the simulator's streamed words, so streams look like streams. */
  simulatorWordDelayMs: number;
  /** Upper bound of one upstream call (a whole completion, or a stream's first chunk). */
  upstreamTimeoutMs: number;
  /** Longest pause between two chunks of a stream before it is ended as stalled. */
  upstreamIdleTimeoutMs: number;
  /** Extra attempts at an upstream call that failed before its first byte. */
  upstreamMaxRetries: number;
  /** How long a wallet hold lives before the sweeper gives its money back. */
  holdTtlMs: number;
  /** How long a budget lease stays unused before it goes back to the wallet; 0: as soon as nothing is in flight. */
  walletLeaseIdleMs: number;
  webSearch: { provider?: string; apiKey?: string; baseUrl?: string };
  /** What one call of a server tool costs the caller, in millicents. */
  toolPrices: { web_search: number; file_search: number };
  stripe: { secretKey?: string; webhookSecret?: string; apiBase?: string };
  usageRetentionDays: number;
  /** Signs dashboard session cookies; unset: generated once into DATA_DIR (see dashboard/session-secret.ts). */
  sessionSecret?: string;
  dashboard: {
    /** The address people reach (links in mail); unset: taken from each request. No trailing slash. */
    publicUrl?: string;
    /** A sub-path the service is hosted under (`/acs`), or '' for the root. */
    basePath: string;
    /** Who may create an account: anyone, people with an invitation, or nobody (the operator). */
    signup: 'open' | 'invite' | 'closed';
    /** Tier of the first workspace of a new account. */
    signupDefaultTier: TierName;
    smtpUrl?: string;
    mailFrom: string;
  };
  logLevel: 'error' | 'warn' | 'log' | 'debug' | 'verbose';
}

export class ConfigError extends Error {
  constructor(readonly problems: string[]) {
    super(`Invalid configuration:\n${problems.map((p) => `  - ${p}`).join('\n')}`);
    this.name = 'ConfigError';
  }
}

type Env = Record<string, string | undefined>;

/**
 * Reads and validates every variable before failing, so an operator fixes all bad
 * values in one go instead of one restart per mistake.
 */
export function loadConfig(env: Env = process.env): AppConfig {
  const problems: string[] = [];
  const read = new EnvReader(env, problems);

  const nodeEnv = read.string('NODE_ENV') ?? 'development';
  const config: AppConfig = {
    nodeEnv,
    production: nodeEnv === 'production',
    port: read.integer('PORT', 3000, 0, 65535),
    host: read.string('HOST') ?? '0.0.0.0',
    databaseUrl: read.url('DATABASE_URL', ['postgres:', 'postgresql:']),
    dataDir: path.resolve(read.string('DATA_DIR') ?? './.data'),
    redisUrl: read.url('REDIS_URL', ['redis:', 'rediss:']),
    bodyLimit: read.pattern('BODY_LIMIT', /^\d+(b|kb|mb)$/i, '"<n>kb" or "<n>mb"') ?? '10mb',
    trustProxy: parseTrustProxy(read.string('TRUST_PROXY') ?? 'loopback'),
    anonymousRateLimitRpm: read.integer('RATE_LIMIT_ANONYMOUS_RPM', 60, 1, 1_000_000),
    providers: readProviders(read),
    modelCatalogFile: read.string('MODEL_CATALOG_FILE'),
    llmSimulator: read.oneOf('LLM_SIMULATOR', ['auto', 'on', 'off'] as const) ?? 'auto',
    simulatorWordDelayMs: read.integer('SIMULATOR_WORD_DELAY_MS', 15, 0, 10_000),
    upstreamTimeoutMs: read.integer('UPSTREAM_TIMEOUT_MS', 120_000, 1_000, 3_600_000),
    upstreamIdleTimeoutMs: read.integer('UPSTREAM_IDLE_TIMEOUT_MS', 60_000, 100, 3_600_000),
    upstreamMaxRetries: read.integer('UPSTREAM_MAX_RETRIES', 2, 0, 10),
    holdTtlMs: read.integer('HOLD_TTL_MS', 15 * 60_000, 10_000, 24 * 3_600_000),
    walletLeaseIdleMs: read.integer('WALLET_LEASE_IDLE_MS', 500, 0, 60_000),
    webSearch: {
      provider: read.oneOf('WEB_SEARCH_PROVIDER', WEB_SEARCH_PROVIDERS),
      apiKey: read.string('WEB_SEARCH_API_KEY'),
      baseUrl: read.url('WEB_SEARCH_BASE_URL', ['http:', 'https:']),
    },
    toolPrices: {
      web_search: read.integer('WEB_SEARCH_PRICE_MILLICENTS', 1_000, 0, 1_000_000),
      file_search: read.integer('FILE_SEARCH_PRICE_MILLICENTS', 100, 0, 1_000_000),
    },
    stripe: {
      secretKey: read.string('STRIPE_SECRET_KEY'),
      webhookSecret: read.string('STRIPE_WEBHOOK_SECRET'),
      apiBase: read.url('STRIPE_API_BASE', ['http:', 'https:']),
    },
    usageRetentionDays: read.integer('USAGE_RETENTION_DAYS', 90, 1, 36_500),
    sessionSecret: read.string('SESSION_SECRET'),
    dashboard: {
      publicUrl: read.url('PUBLIC_URL', ['http:', 'https:'])?.replace(/\/+$/, ''),
      basePath: read.pattern('BASE_PATH', /^(\/[A-Za-z0-9._~-]+)*\/?$/, '"/" or a path such as "/chat"', { lowercase: false })?.replace(/\/+$/, '') ?? '',
      signup: read.oneOf('SIGNUP', ['open', 'invite', 'closed'] as const) ?? (nodeEnv === 'production' ? 'invite' : 'open'),
      signupDefaultTier: read.oneOf('SIGNUP_DEFAULT_TIER', TIER_NAMES) ?? 'free',
      smtpUrl: read.url('SMTP_URL', ['smtp:', 'smtps:']),
      mailFrom: read.string('MAIL_FROM') ?? 'Assistant Chat Service <no-reply@localhost>',
    },
    logLevel: read.oneOf('LOG_LEVEL', ['error', 'warn', 'log', 'debug', 'verbose'] as const) ?? 'log',
  };

  problems.push(...webSearchConfigProblems(config.webSearch));
  if (config.production && !config.databaseUrl) {
    problems.push(
      'DATABASE_URL is required when NODE_ENV=production: the embedded PostgreSQL is for development and keeps its data in DATA_DIR',
    );
  }
  if (config.production && config.dashboard.smtpUrl && !config.dashboard.publicUrl) {
    // Links in mail built from the request's Host header would let anyone send a reset link pointing elsewhere.
    problems.push('PUBLIC_URL is required when SMTP_URL is set in production: links in mail are built from it, never from the Host header');
  }
  if (config.sessionSecret !== undefined && config.sessionSecret.length < 32) {
    problems.push('SESSION_SECRET must be at least 32 characters long');
  }
  if (problems.length > 0) throw new ConfigError(problems);
  return config;
}

function readProviders(read: EnvReader): Record<UpstreamProviderName, UpstreamConfig> {
  const entries = UPSTREAM_PROVIDERS.map(([name, prefix]): [UpstreamProviderName, UpstreamConfig] => [
    name,
    { apiKey: read.string(`${prefix}_API_KEY`), baseUrl: read.url(`${prefix}_BASE_URL`, ['http:', 'https:']) },
  ]);
  return Object.fromEntries(entries) as Record<UpstreamProviderName, UpstreamConfig>;
}

function parseTrustProxy(value: string): boolean | number | string {
  if (value === 'true' || value === 'false') return value === 'true';
  return /^\d+$/.test(value) ? Number(value) : value;
}

class EnvReader {
  constructor(
    private readonly env: Env,
    private readonly problems: string[],
  ) {}

  /** Unset and empty are the same: `FOO=` in an env file means "not configured". */
  string(name: string): string | undefined {
    const value = this.env[name]?.trim();
    return value ? value : undefined;
  }

  integer(name: string, fallback: number, min: number, max: number): number {
    const raw = this.string(name);
    if (raw === undefined) return fallback;
    const value = Number(raw);
    if (!/^-?\d+$/.test(raw) || value < min || value > max) {
      this.problems.push(`${name} must be an integer from ${min} to ${max} (got "${raw}")`);
      return fallback;
    }
    return value;
  }

  oneOf<T extends string>(name: string, allowed: readonly T[]): T | undefined {
    const raw = this.string(name)?.toLowerCase();
    if (raw === undefined) return undefined;
    if (!(allowed as readonly string[]).includes(raw)) {
      this.problems.push(`${name} must be one of ${allowed.join(', ')} (got "${raw}")`);
      return undefined;
    }
    return raw as T;
  }

  url(name: string, protocols: string[]): string | undefined {
    const raw = this.string(name);
    if (raw === undefined) return undefined;
    try {
      const url = new URL(raw);
      if (protocols.includes(url.protocol)) return raw;
    } catch {
      // reported below
    }
    this.problems.push(`${name} must be a URL starting with ${protocols.map((p) => `${p}//`).join(' or ')}`);
    return undefined;
  }

  pattern(name: string, pattern: RegExp, expected: string, { lowercase = true } = {}): string | undefined {
    const raw = this.string(name);
    if (raw === undefined) return undefined;
    if (!pattern.test(raw)) {
      this.problems.push(`${name} must look like ${expected} (got "${raw}")`);
      return undefined;
    }
    return lowercase ? raw.toLowerCase() : raw;
  }
}
