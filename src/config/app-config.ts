import * as path from 'node:path';
import { urlPassword } from '../common/secrets';
import { TIER_NAMES, TierName } from '../common/tier-name';
import { WEB_SEARCH_PROVIDERS, webSearchConfigProblems } from './web-search-config';

export type SimulatorMode = 'auto' | 'on' | 'off';
export const PAYMENT_PROVIDER_SETTINGS = ['stripe', 'simulated', 'none'] as const;
export type PaymentProviderSetting = (typeof PAYMENT_PROVIDER_SETTINGS)[number];

/**
 * The upstream providers, each with the prefix of its variables: `<PREFIX>_API_KEY` and
 * `<PREFIX>_BASE_URL` (a contract: docs/architecture.md, "Configuration (contract)"). The catalog's provider names are
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
  /**
   * How long the service's statements may wait on PostgreSQL (see database/data-source.ts):
   * past these a request is refused with 503 `database_unavailable`. The CLI and migrations
   * have no statement bound.
   */
  database: {
    /** PostgreSQL's statement_timeout and lock_timeout (DATABASE_STATEMENT_TIMEOUT_MS). */
    statementTimeoutMs: number;
    /** The wait for any answer of a server that may not answer at all (DATABASE_ANSWER_TIMEOUT_MS); then the connection is dropped. */
    answerTimeoutMs: number;
    /** Getting a connection: from the pool, or a new one (DATABASE_CONNECT_TIMEOUT_MS). */
    connectTimeoutMs: number;
  };
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
  /** How long a failing deployment gets no traffic (src/providers/routing). */
  routingCooldownMs: number;
  /** How long a wallet hold lives before the sweeper gives its money back. */
  holdTtlMs: number;
  /** How long a budget lease stays unused before it goes back to the wallet; 0: as soon as nothing is in flight. */
  walletLeaseIdleMs: number;
  /**
   * PostgreSQL's synchronous_commit for settlement transactions: `on` waits for the WAL to
   * reach the disk before a client is told its cost; `off` does not, so a crash of
   * PostgreSQL itself (not of this service) can lose the last moments of settlements.
   */
  settlementSynchronousCommit: 'on' | 'off';
  /**
   * When a chat request's answer may go out (SETTLEMENT_DURABILITY). `journal` (the default):
   * once its settlement is appended to a journal under DATA_DIR, which outlives the process
   * (the next process on that host and DATA_DIR writes what did not commit); the commit
   * follows within milliseconds, and a balance or usage read in this process waits for it. A
   * charge is lost only with the journal: the machine's crash before the operating system
   * wrote the file, or DATA_DIR gone with the process. `commit`: once the settlement has
   * committed in PostgreSQL.
   */
  settlementDurability: 'journal' | 'commit';
  webSearch: { provider?: string; apiKey?: string; baseUrl?: string };
  /** What one call of a server tool costs the caller, in millicents. */
  toolPrices: { web_search: number; file_search: number };
  stripe: { secretKey?: string; webhookSecret?: string; apiBase?: string };
  /** Who takes payments, and the bounds of what top-ups may take (see payments/payments.module.ts). */
  payments: {
    /** PAYMENT_PROVIDER; unset: Stripe with its key, else simulated only when every model is simulated, else none. */
    provider?: PaymentProviderSetting;
    /** The largest top-up, manual or automatic (whole cents). */
    topupMaxMillicents: number;
    /** The monthly cap of an auto top-up whose owner set none. */
    autoTopupDefaultMonthlyCapMillicents: number;
    /** The largest monthly cap an owner may set. */
    autoTopupMaxMonthlyCapMillicents: number;
    /** Automatic charges per workspace per hour, whatever its settings. */
    autoTopupMaxPerHour: number;
  };
  usageRetentionDays: number;
  /**
   * Dashboard document uploads received at once, per workspace and per process (each body is
   * held in memory until stored); one over either bound is refused before its body is read.
   */
  uploads: { perWorkspace: number; perProcess: number };
  /**
   * Reading uploaded documents (see assistants/documents/document-reader.ts): each file is read
   * in a worker thread of its own, killed past these bounds, and marked `failed` with the reason.
   */
  documents: {
    /** Files read at once by this process (DOCUMENT_READERS). */
    readers: number;
    /** A reader is stopped after this long (DOCUMENT_READ_TIMEOUT_SECONDS). */
    readTimeoutMs: number;
    /** The JavaScript heap of one reader (DOCUMENT_READ_MEMORY_MB). */
    readMemoryMb: number;
    /** What a DOCX or a PDF's compressed streams may unpack to (DOCUMENT_MAX_UNPACKED_MB). */
    maxUnpackedBytes: number;
    /** How long a background reading may go without renewing its lease before another process takes it up. */
    leaseSeconds: number;
    /** Memory for the chunk vectors this process keeps for the dense leg of `file_search` (VECTOR_CACHE_MB). */
    vectorCacheBytes: number;
  };
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
    /**
     * OPERATOR_EMAILS: accounts with these emails (lower case) see the operator console, as
     * do accounts marked by `cli operator grant`.
     */
    operatorEmails: string[];
  };
  logLevel: 'error' | 'warn' | 'log' | 'debug' | 'verbose';
  /** `json`: one pino JSON object per line (production default); `pretty`: Nest's coloured text. */
  logFormat: 'json' | 'pretty';
  /** Node's HTTP server timeouts (see `applyServerTimeouts` in app.factory.ts). */
  http: {
    /** Idle time a kept-alive connection stays open: above load balancers' idle timeouts (60 s on AWS, nginx, GCP's 600 s aside). */
    keepAliveTimeoutMs: number;
    /** Time to receive a request's headers; above the keep-alive timeout, as Node requires to avoid a race. */
    headersTimeoutMs: number;
    /** Time to receive a whole request (headers and body); 0: none. It never bounds a response, so never cuts a stream. */
    requestTimeoutMs: number;
  };
  /** On SIGTERM, how long requests and streams may go on before open streams are ended with `server_shutting_down`. */
  shutdownDrainMs: number;
  /**
   * `on` (the default): POST /v1/chat/completions is served in front of Express and Nest
   * (common/http/direct-route.ts), and the service refuses to start if Nest would run around
   * it an enhancer the direct route does not; `off`: through Nest, like every other route.
   */
  directRoute: 'on' | 'off';
  /** `/metrics`: a bearer token it requires, and/or a port of its own; with neither it is not served. */
  metrics: { token?: string; port?: number };
}

/**
 * The configuration's secret values (keys, tokens, the passwords of its URLs), registered at
 * start (common/secrets.ts) so that client messages and logs never carry them.
 */
export function configuredSecrets(config: AppConfig): (string | undefined)[] {
  return [
    ...Object.values(config.providers).map((provider) => provider.apiKey),
    config.webSearch.apiKey,
    config.stripe.secretKey,
    config.stripe.webhookSecret,
    config.sessionSecret,
    config.metrics.token,
    ...[config.databaseUrl, config.redisUrl, config.dashboard.smtpUrl].map(urlPassword),
  ];
}

export class ConfigError extends Error {
  constructor(
    readonly problems: string[],
    heading = 'Invalid configuration',
  ) {
    super(`${heading}:\n${problems.map((p) => `  - ${p}`).join('\n')}`);
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
    database: {
      statementTimeoutMs: read.integer('DATABASE_STATEMENT_TIMEOUT_MS', 5_000, 100, 600_000),
      answerTimeoutMs: read.integer('DATABASE_ANSWER_TIMEOUT_MS', 6_000, 200, 600_000),
      connectTimeoutMs: read.integer('DATABASE_CONNECT_TIMEOUT_MS', 3_000, 100, 60_000),
    },
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
    routingCooldownMs: read.integer('ROUTING_COOLDOWN_MS', 30_000, 100, 3_600_000),
    holdTtlMs: read.integer('HOLD_TTL_MS', 15 * 60_000, 10_000, 24 * 3_600_000),
    walletLeaseIdleMs: read.integer('WALLET_LEASE_IDLE_MS', 500, 0, 60_000),
    settlementSynchronousCommit: read.oneOf('SETTLEMENT_SYNCHRONOUS_COMMIT', ['on', 'off'] as const) ?? 'on',
    settlementDurability: read.oneOf('SETTLEMENT_DURABILITY', ['journal', 'commit'] as const) ?? 'journal',
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
    payments: {
      provider: read.oneOf('PAYMENT_PROVIDER', PAYMENT_PROVIDER_SETTINGS),
      topupMaxMillicents: read.integer('TOPUP_MAX_MILLICENTS', 1_000_000_000, 100_000, 100_000_000_000),
      autoTopupDefaultMonthlyCapMillicents: read.integer('AUTO_TOPUP_DEFAULT_MONTHLY_CAP_MILLICENTS', 50_000_000, 1_000, 1_000_000_000_000),
      autoTopupMaxMonthlyCapMillicents: read.integer('AUTO_TOPUP_MAX_MONTHLY_CAP_MILLICENTS', 5_000_000_000, 1_000, 1_000_000_000_000),
      autoTopupMaxPerHour: read.integer('AUTO_TOPUP_MAX_PER_HOUR', 3, 1, 1_000),
    },
    usageRetentionDays: read.integer('USAGE_RETENTION_DAYS', 90, 1, 36_500),
    uploads: {
      perWorkspace: read.integer('UPLOAD_CONCURRENCY_PER_WORKSPACE', 2, 1, 100),
      perProcess: read.integer('UPLOAD_CONCURRENCY_PER_PROCESS', 8, 1, 1_000),
    },
    documents: {
      readers: read.integer('DOCUMENT_READERS', 2, 1, 64),
      readTimeoutMs: read.integer('DOCUMENT_READ_TIMEOUT_SECONDS', 120, 1, 3_600) * 1000,
      readMemoryMb: read.integer('DOCUMENT_READ_MEMORY_MB', 512, 64, 16_384),
      maxUnpackedBytes: read.integer('DOCUMENT_MAX_UNPACKED_MB', 50, 1, 4_096) * 1024 * 1024,
      leaseSeconds: read.integer('DOCUMENT_LEASE_SECONDS', 120, 2, 3_600),
      vectorCacheBytes: read.integer('VECTOR_CACHE_MB', 512, 0, 1_048_576) * 1024 * 1024,
    },
    sessionSecret: read.string('SESSION_SECRET'),
    dashboard: {
      publicUrl: read.url('PUBLIC_URL', ['http:', 'https:'])?.replace(/\/+$/, ''),
      basePath: read.pattern('BASE_PATH', /^(\/[A-Za-z0-9._~-]+)*\/?$/, '"/" or a path such as "/chat"', { lowercase: false })?.replace(/\/+$/, '') ?? '',
      signup: read.oneOf('SIGNUP', ['open', 'invite', 'closed'] as const) ?? (nodeEnv === 'production' ? 'invite' : 'open'),
      signupDefaultTier: read.oneOf('SIGNUP_DEFAULT_TIER', TIER_NAMES) ?? 'free',
      smtpUrl: read.url('SMTP_URL', ['smtp:', 'smtps:']),
      mailFrom: read.string('MAIL_FROM') ?? 'Assistant Chat Service <no-reply@localhost>',
      operatorEmails: read.emails('OPERATOR_EMAILS'),
    },
    logLevel: read.oneOf('LOG_LEVEL', ['error', 'warn', 'log', 'debug', 'verbose'] as const) ?? 'log',
    logFormat: read.oneOf('LOG_FORMAT', ['json', 'pretty'] as const) ?? (nodeEnv === 'production' ? 'json' : 'pretty'),
    http: {
      keepAliveTimeoutMs: read.integer('HTTP_KEEP_ALIVE_TIMEOUT_MS', 65_000, 1_000, 3_600_000),
      headersTimeoutMs: read.integer('HTTP_HEADERS_TIMEOUT_MS', 66_000, 1_000, 3_600_000),
      requestTimeoutMs: read.integer('HTTP_REQUEST_TIMEOUT_MS', 300_000, 0, 3_600_000),
    },
    shutdownDrainMs: read.integer('SHUTDOWN_DRAIN_MS', 30_000, 0, 3_600_000),
    directRoute: read.oneOf('DIRECT_ROUTE', ['on', 'off'] as const) ?? 'on',
    metrics: {
      token: read.string('METRICS_TOKEN'),
      port: read.optionalInteger('METRICS_PORT', 1, 65535),
    },
  };

  problems.push(...webSearchConfigProblems(config.webSearch));
  if (config.production && !config.databaseUrl) {
    problems.push(
      'DATABASE_URL is required when NODE_ENV=production: the embedded PostgreSQL is for development and keeps its data in DATA_DIR',
    );
  }
  if (config.dashboard.smtpUrl && !config.dashboard.publicUrl) {
    // Links in mail built from the request's Host header would let anyone send a reset link pointing elsewhere,
    // in any environment: mail leaves the machine even when NODE_ENV is not production.
    problems.push('PUBLIC_URL is required when SMTP_URL is set: links in mail are built from it, never from the Host header');
  }
  if (config.sessionSecret !== undefined && config.sessionSecret.length < 32) {
    problems.push('SESSION_SECRET must be at least 32 characters long');
  }
  problems.push(...serverConfigProblems(config));
  if (config.database.answerTimeoutMs <= config.database.statementTimeoutMs) {
    // PostgreSQL cancels a slow statement itself first, keeping the connection; the answer bound is for a server that answers nothing.
    problems.push(
      `DATABASE_ANSWER_TIMEOUT_MS (${config.database.answerTimeoutMs}) must be greater than DATABASE_STATEMENT_TIMEOUT_MS (${config.database.statementTimeoutMs})`,
    );
  }
  problems.push(...paymentConfigProblems(config));
  if (problems.length > 0) throw new ConfigError(problems);
  return config;
}

/** The HTTP server's and /metrics' settings that only make sense together. */
function serverConfigProblems({ http, metrics, port }: AppConfig): string[] {
  const problems: string[] = [];
  if (http.headersTimeoutMs <= http.keepAliveTimeoutMs) {
    // Otherwise a request arriving just as a kept-alive connection times out can be cut.
    problems.push(
      `HTTP_HEADERS_TIMEOUT_MS (${http.headersTimeoutMs}) must be greater than HTTP_KEEP_ALIVE_TIMEOUT_MS (${http.keepAliveTimeoutMs})`,
    );
  }
  if (http.requestTimeoutMs !== 0 && http.requestTimeoutMs < http.headersTimeoutMs) {
    problems.push(`HTTP_REQUEST_TIMEOUT_MS (${http.requestTimeoutMs}) must be 0 or at least HTTP_HEADERS_TIMEOUT_MS (${http.headersTimeoutMs})`);
  }
  if (metrics.token !== undefined && metrics.token.length < 16) problems.push('METRICS_TOKEN must be at least 16 characters long');
  if (metrics.port !== undefined && metrics.port === port) problems.push(`METRICS_PORT must differ from PORT (${port})`);
  return problems;
}

/** Payment settings that contradict each other or the environment. */
function paymentConfigProblems({ payments, stripe, production }: AppConfig): string[] {
  const problems: string[] = [];
  if (payments.provider === 'stripe' && !stripe.secretKey) problems.push('PAYMENT_PROVIDER=stripe needs STRIPE_SECRET_KEY');
  // Simulated payments credit whatever a form asks: never where the money is real.
  if (payments.provider === 'simulated' && production) problems.push('PAYMENT_PROVIDER=simulated is refused when NODE_ENV=production');
  if (payments.topupMaxMillicents % 1_000 !== 0) problems.push('TOPUP_MAX_MILLICENTS must be whole cents (a multiple of 1000)');
  if (payments.autoTopupDefaultMonthlyCapMillicents > payments.autoTopupMaxMonthlyCapMillicents) {
    problems.push(
      `AUTO_TOPUP_DEFAULT_MONTHLY_CAP_MILLICENTS (${payments.autoTopupDefaultMonthlyCapMillicents}) must not exceed AUTO_TOPUP_MAX_MONTHLY_CAP_MILLICENTS (${payments.autoTopupMaxMonthlyCapMillicents})`,
    );
  }
  return problems;
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

  /** A comma-separated list of email addresses, lower-cased; [] when unset. */
  emails(name: string): string[] {
    const raw = this.string(name);
    if (raw === undefined) return [];
    const emails = raw.split(',').map((email) => email.trim().toLowerCase()).filter(Boolean);
    const bad = emails.filter((email) => !/^[^\s@,]+@[^\s@,]+\.[^\s@,]+$/.test(email));
    if (bad.length > 0) {
      this.problems.push(`${name} must be email addresses separated by commas (not an address: "${bad.join('", "')}")`);
      return [];
    }
    return [...new Set(emails)];
  }

  /** An integer that has no default: undefined when unset. */
  optionalInteger(name: string, min: number, max: number): number | undefined {
    return this.string(name) === undefined ? undefined : this.integer(name, min, min, max);
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
