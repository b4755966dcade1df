import { ConfigError, loadConfig } from './app-config';

describe('loadConfig', () => {
  it('has working defaults for an empty environment', () => {
    const config = loadConfig({});
    expect(config).toMatchObject({
      port: 3000,
      host: '0.0.0.0',
      databaseUrl: undefined,
      llmSimulator: 'auto',
      usageRetentionDays: 90,
      production: false,
    });
    expect(config.dataDir).toMatch(/\.data$/);
  });

  it('reads the documented variables', () => {
    const config = loadConfig({
      PORT: '8080',
      DATABASE_URL: 'postgres://u:p@db:5432/acs',
      REDIS_URL: 'redis://cache:6379',
      LLM_SIMULATOR: 'off',
      WEB_SEARCH_PROVIDER: 'tavily',
      WEB_SEARCH_API_KEY: 'tvly-key',
      NODE_ENV: 'production',
    });
    expect(config).toMatchObject({
      port: 8080,
      databaseUrl: 'postgres://u:p@db:5432/acs',
      redisUrl: 'redis://cache:6379',
      llmSimulator: 'off',
      webSearch: { provider: 'tavily' },
      production: true,
    });
  });

  it('names every bad variable in one error', () => {
    let error: unknown;
    try {
      loadConfig({ PORT: 'eighty', DATABASE_URL: 'mysql://x', LLM_SIMULATOR: 'maybe', USAGE_RETENTION_DAYS: '-1' });
    } catch (e) {
      error = e;
    }
    expect(error).toBeInstanceOf(ConfigError);
    const problems = (error as ConfigError).problems;
    expect(problems).toHaveLength(4);
    expect((error as ConfigError).message).toMatch(/PORT[\s\S]*DATABASE_URL[\s\S]*LLM_SIMULATOR[\s\S]*USAGE_RETENTION_DAYS/);
  });

  it('reads each upstream provider from <PREFIX>_API_KEY and <PREFIX>_BASE_URL', () => {
    const config = loadConfig({
      OPENAI_API_KEY: 'sk-1',
      OPENAI_BASE_URL: 'http://vllm.local/v1',
      ANTHROPIC_API_KEY: ' ',
      GEMINI_API_KEY: 'g-1',
      GEMINI_BASE_URL: 'https://proxy.example.com',
    });
    expect(config.providers).toEqual({
      openai: { apiKey: 'sk-1', baseUrl: 'http://vllm.local/v1' },
      anthropic: { apiKey: undefined, baseUrl: undefined },
      google: { apiKey: 'g-1', baseUrl: 'https://proxy.example.com' },
    });
    expect(() => loadConfig({ OPENAI_BASE_URL: 'vllm.local', ANTHROPIC_BASE_URL: 'ftp://x' })).toThrow(
      /OPENAI_BASE_URL must be a URL starting with http:\/\/ or https:\/\/[\s\S]*ANTHROPIC_BASE_URL/,
    );
  });

  it('does not echo a database URL (it may hold a password) when it is invalid', () => {
    expect(() => loadConfig({ DATABASE_URL: 'ftp://user:secret@host/db' })).toThrow(/DATABASE_URL/);
    expect(() => loadConfig({ DATABASE_URL: 'ftp://user:secret@host/db' })).not.toThrow(/secret/);
  });

  it('refuses an unfinished web search configuration, naming the missing variable', () => {
    expect(() => loadConfig({ WEB_SEARCH_PROVIDER: 'brave' })).toThrow(/WEB_SEARCH_PROVIDER=brave needs WEB_SEARCH_API_KEY/);
    expect(() => loadConfig({ WEB_SEARCH_PROVIDER: 'searxng' })).toThrow(/needs WEB_SEARCH_BASE_URL/);
    expect(loadConfig({ WEB_SEARCH_PROVIDER: 'searxng', WEB_SEARCH_BASE_URL: 'http://searx.local' }).webSearch.provider).toBe('searxng');
  });

  it('reads the dashboard variables, with sign-up open outside production', () => {
    expect(loadConfig({}).dashboard).toEqual({
      publicUrl: undefined,
      basePath: '',
      signup: 'open',
      signupDefaultTier: 'free',
      smtpUrl: undefined,
      mailFrom: expect.any(String),
      operatorEmails: [],
    });
    const config = loadConfig({
      PUBLIC_URL: 'https://chat.example.com/Acs/',
      BASE_PATH: '/Acs/',
      SIGNUP: 'closed',
      SIGNUP_DEFAULT_TIER: 'hobby',
      SMTP_URL: 'smtp://user:pass@mail.example.com:587',
      MAIL_FROM: 'Chat <chat@example.com>',
      OPERATOR_EMAILS: ' Oona@Example.com, ops@example.com,oona@example.com ',
    });
    // The path keeps its case (paths are case-sensitive) and loses its trailing slash.
    expect(config.dashboard).toEqual({
      publicUrl: 'https://chat.example.com/Acs',
      basePath: '/Acs',
      signup: 'closed',
      signupDefaultTier: 'hobby',
      smtpUrl: 'smtp://user:pass@mail.example.com:587',
      mailFrom: 'Chat <chat@example.com>',
      operatorEmails: ['oona@example.com', 'ops@example.com'],
    });
    expect(loadConfig({ BASE_PATH: '/' }).dashboard.basePath).toBe('');
  });

  it('refuses a bad dashboard variable by name', () => {
    expect(() => loadConfig({ BASE_PATH: 'acs' })).toThrow(/BASE_PATH/);
    expect(() => loadConfig({ SIGNUP: 'everyone' })).toThrow(/SIGNUP must be one of open, invite, closed/);
    expect(() => loadConfig({ OPERATOR_EMAILS: 'oona@example.com; ops' })).toThrow(
      /OPERATOR_EMAILS must be email addresses separated by commas \(not an address: "oona@example.com; ops"\)/,
    );
    expect(() => loadConfig({ SIGNUP_DEFAULT_TIER: 'gold' })).toThrow(/SIGNUP_DEFAULT_TIER/);
    expect(() => loadConfig({ SMTP_URL: 'http://mail' })).toThrow(/SMTP_URL/);
  });

  it('requires PUBLIC_URL with SMTP_URL outside production too: mailed links never come from the Host header', () => {
    for (const NODE_ENV of [undefined, 'development', 'test']) {
      const env = { ...(NODE_ENV ? { NODE_ENV } : {}), SMTP_URL: 'smtp://mail.example.com:25' };
      expect(() => loadConfig(env)).toThrow(/PUBLIC_URL is required when SMTP_URL is set/);
      expect(loadConfig({ ...env, PUBLIC_URL: 'https://chat.example.com/' }).dashboard).toMatchObject({
        publicUrl: 'https://chat.example.com',
        smtpUrl: 'smtp://mail.example.com:25',
      });
    }
    // Without mail, links only go to the log and to the page of the person who asked: no PUBLIC_URL needed.
    expect(loadConfig({}).dashboard.publicUrl).toBeUndefined();
  });

  it('treats empty values as unset', () => {
    expect(loadConfig({ PORT: '', REDIS_URL: ' ' })).toMatchObject({ port: 3000, redisUrl: undefined });
  });
});

describe('loadConfig in production', () => {
  it('requires DATABASE_URL: the embedded database is for development', () => {
    expect(() => loadConfig({ NODE_ENV: 'production' })).toThrow(/DATABASE_URL is required/);
    expect(loadConfig({ NODE_ENV: 'production', DATABASE_URL: 'postgres://db/acs' }).production).toBe(true);
  });

  it('asks for an invitation to sign up, unless SIGNUP says otherwise', () => {
    const production = { NODE_ENV: 'production', DATABASE_URL: 'postgres://db/acs' };
    expect(loadConfig(production).dashboard.signup).toBe('invite');
    expect(loadConfig({ ...production, SIGNUP: 'open' }).dashboard.signup).toBe('open');
  });

  it('requires PUBLIC_URL with SMTP_URL: mailed links must not come from the Host header', () => {
    const production = { NODE_ENV: 'production', DATABASE_URL: 'postgres://db/acs', SMTP_URL: 'smtp://mail:25' };
    expect(() => loadConfig(production)).toThrow(/PUBLIC_URL is required/);
    expect(loadConfig({ ...production, PUBLIC_URL: 'https://chat.example.com' }).dashboard.publicUrl).toBe('https://chat.example.com');
  });
});

describe('loadConfig: HTTP server, shutdown, metrics and logs (issue 13)', () => {
  it('keeps connections alive longer than load balancers do, and never bounds a response by default', () => {
    const config = loadConfig({});
    expect(config.http).toEqual({ keepAliveTimeoutMs: 65_000, headersTimeoutMs: 66_000, requestTimeoutMs: 300_000 });
    expect(config.shutdownDrainMs).toBe(30_000);
    expect(config.metrics).toEqual({ token: undefined, port: undefined });
    expect(config.logFormat).toBe('pretty');
    expect(loadConfig({ NODE_ENV: 'production', DATABASE_URL: 'postgres://db/acs' }).logFormat).toBe('json');
  });

  it('reads the variables', () => {
    const config = loadConfig({
      HTTP_KEEP_ALIVE_TIMEOUT_MS: '120000',
      HTTP_HEADERS_TIMEOUT_MS: '121000',
      HTTP_REQUEST_TIMEOUT_MS: '0',
      SHUTDOWN_DRAIN_MS: '5000',
      METRICS_TOKEN: 'metrics-token-0123456789',
      METRICS_PORT: '9464',
      LOG_FORMAT: 'json',
    });
    expect(config.http).toEqual({ keepAliveTimeoutMs: 120_000, headersTimeoutMs: 121_000, requestTimeoutMs: 0 });
    expect(config.shutdownDrainMs).toBe(5_000);
    expect(config.metrics).toEqual({ token: 'metrics-token-0123456789', port: 9464 });
    expect(config.logFormat).toBe('json');
  });

  it('refuses settings that contradict each other, naming each', () => {
    let error: unknown;
    try {
      loadConfig({
        HTTP_KEEP_ALIVE_TIMEOUT_MS: '70000',
        HTTP_HEADERS_TIMEOUT_MS: '60000',
        HTTP_REQUEST_TIMEOUT_MS: '5000',
        METRICS_TOKEN: 'short',
        METRICS_PORT: '3000',
        LOG_FORMAT: 'xml',
      });
    } catch (e) {
      error = e;
    }
    expect(error).toBeInstanceOf(ConfigError);
    const message = (error as ConfigError).message;
    expect(message).toMatch(/HTTP_HEADERS_TIMEOUT_MS \(60000\) must be greater than HTTP_KEEP_ALIVE_TIMEOUT_MS \(70000\)/);
    expect(message).toMatch(/HTTP_REQUEST_TIMEOUT_MS \(5000\) must be 0 or at least/);
    expect(message).toMatch(/METRICS_TOKEN must be at least 16 characters/);
    expect(message).toMatch(/METRICS_PORT must differ from PORT \(3000\)/);
    expect(message).toMatch(/LOG_FORMAT must be one of json, pretty/);
  });
});

describe('loadConfig: dashboard uploads received at once (issue 29)', () => {
  it('defaults to 2 per workspace and 8 per process, reads both, and refuses 0', () => {
    expect(loadConfig({}).uploads).toEqual({ perWorkspace: 2, perProcess: 8 });
    expect(loadConfig({ UPLOAD_CONCURRENCY_PER_WORKSPACE: '1', UPLOAD_CONCURRENCY_PER_PROCESS: '20' }).uploads).toEqual({ perWorkspace: 1, perProcess: 20 });
    expect(() => loadConfig({ UPLOAD_CONCURRENCY_PER_WORKSPACE: '0', UPLOAD_CONCURRENCY_PER_PROCESS: 'many' })).toThrow(
      /UPLOAD_CONCURRENCY_PER_WORKSPACE must be an integer from 1 to 100[\s\S]*UPLOAD_CONCURRENCY_PER_PROCESS must be an integer from 1 to 1000/,
    );
  });
});

describe('loadConfig: document readers (issue 29)', () => {
  it('defaults to 2 readers of 512 MB and 120 s, 50 MB unpacked, a 120 s lease; reads each and refuses values out of range', () => {
    expect(loadConfig({}).documents).toEqual({ readers: 2, readTimeoutMs: 120_000, readMemoryMb: 512, maxUnpackedBytes: 50 * 1024 * 1024, leaseSeconds: 120, vectorCacheBytes: 512 * 1024 * 1024 });
    expect(
      loadConfig({
        DOCUMENT_READERS: '4',
        DOCUMENT_READ_TIMEOUT_SECONDS: '30',
        DOCUMENT_READ_MEMORY_MB: '256',
        DOCUMENT_MAX_UNPACKED_MB: '100',
        DOCUMENT_LEASE_SECONDS: '10',
      }).documents,
    ).toEqual({ readers: 4, readTimeoutMs: 30_000, readMemoryMb: 256, maxUnpackedBytes: 100 * 1024 * 1024, leaseSeconds: 10, vectorCacheBytes: 512 * 1024 * 1024 });
    expect(() => loadConfig({ DOCUMENT_READERS: '0', DOCUMENT_READ_MEMORY_MB: '16', DOCUMENT_MAX_UNPACKED_MB: 'lots' })).toThrow(
      /DOCUMENT_READERS must be an integer from 1 to 64[\s\S]*DOCUMENT_READ_MEMORY_MB must be an integer from 64 to 16384[\s\S]*DOCUMENT_MAX_UNPACKED_MB must be an integer from 1 to 4096/,
    );
  });
});

describe('loadConfig: bounds of the waits on the database (issue 30)', () => {
  it('bounds statements at 5 s, a server that answers nothing at 6 s and getting a connection at 3 s by default', () => {
    expect(loadConfig({}).database).toEqual({ statementTimeoutMs: 5_000, answerTimeoutMs: 6_000, connectTimeoutMs: 3_000 });
  });

  it('reads the variables', () => {
    const config = loadConfig({ DATABASE_STATEMENT_TIMEOUT_MS: '2000', DATABASE_ANSWER_TIMEOUT_MS: '2500', DATABASE_CONNECT_TIMEOUT_MS: '1000' });
    expect(config.database).toEqual({ statementTimeoutMs: 2_000, answerTimeoutMs: 2_500, connectTimeoutMs: 1_000 });
  });

  it('refuses an answer bound not above the statement bound: PostgreSQL must cancel a slow statement before its connection is dropped', () => {
    expect(() => loadConfig({ DATABASE_STATEMENT_TIMEOUT_MS: '6000' })).toThrow(
      'DATABASE_ANSWER_TIMEOUT_MS (6000) must be greater than DATABASE_STATEMENT_TIMEOUT_MS (6000)',
    );
    expect(() => loadConfig({ DATABASE_CONNECT_TIMEOUT_MS: '0' })).toThrow('DATABASE_CONNECT_TIMEOUT_MS must be an integer from 100 to 60000');
  });
});
