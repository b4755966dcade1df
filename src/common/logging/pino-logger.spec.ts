import { Logger } from '@nestjs/common';
import { registerSecrets } from '../secrets';
import { PinoLoggerService, RedactingConsoleLogger, redactSecrets } from './pino-logger';

/** A logger writing into an array of parsed lines. */
function capture(level: 'log' | 'error' = 'log') {
  const lines: Record<string, unknown>[] = [];
  const logger = PinoLoggerService.create(level, { write: (line: string) => lines.push(JSON.parse(line) as Record<string, unknown>) });
  return { logger, lines };
}

describe('PinoLoggerService', () => {
  it("writes Nest's named loggers as JSON lines with level, time, context and message", () => {
    const { logger, lines } = capture();
    Logger.overrideLogger(logger);
    try {
      new Logger('Chat').log('A message');
      new Logger('Chat').warn('Careful');
      Logger.log('Static', 'Bootstrap');
    } finally {
      Logger.overrideLogger(['error']);
    }
    expect(lines).toEqual([
      expect.objectContaining({ level: 'info', context: 'Chat', msg: 'A message', time: expect.stringMatching(/^\d{4}-\d\d-\d\dT/) }),
      expect.objectContaining({ level: 'warn', context: 'Chat', msg: 'Careful' }),
      expect.objectContaining({ level: 'info', context: 'Bootstrap', msg: 'Static' }),
    ]);
  });

  it('keeps the stack of an error apart from its context', () => {
    const { logger, lines } = capture();
    const stack = new Error('boom').stack!;
    logger.error('It failed', stack, 'Chat');
    logger.error('Without a stack', undefined, 'Chat');
    expect(lines[0]).toMatchObject({ level: 'error', context: 'Chat', msg: 'It failed', stack });
    expect(lines[1]).toMatchObject({ level: 'error', context: 'Chat', msg: 'Without a stack' });
    expect(lines[1]).not.toHaveProperty('stack');
  });

  it('makes the fields of an object message fields of the line', () => {
    const { logger, lines } = capture();
    logger.log({ msg: 'GET /v1/models 200', reqId: 'req_1', workspaceId: 'ws-1', status: 200 }, 'HTTP');
    expect(lines[0]).toMatchObject({ context: 'HTTP', msg: 'GET /v1/models 200', reqId: 'req_1', workspaceId: 'ws-1', status: 200 });
  });

  it('redacts keys, bearer tokens and URL passwords in messages, and credential fields in objects', () => {
    const { logger, lines } = capture();
    const key = `sk-${'A'.repeat(43)}`;
    logger.log(`Key ${key} used with Authorization: Bearer ${key} on postgres://acs:s3cret@db/acs`);
    logger.log({ msg: 'headers', req: { headers: { authorization: `Bearer ${key}`, cookie: 'acs.sid=abc' } }, apiKey: key });
    const written = JSON.stringify(lines);
    expect(written).not.toContain(key.slice(3));
    expect(written).not.toContain('s3cret');
    expect(written).not.toContain('acs.sid=abc');
    expect(lines[0].msg).toBe('Key sk-[redacted] used with Authorization: Bearer [redacted] on postgres://acs:[redacted]@db/acs');
    expect(lines[1]).toMatchObject({ req: { headers: { authorization: '[redacted]', cookie: '[redacted]' } }, apiKey: '[redacted]' });
    expect(redactSecrets('nothing secret here')).toBe('nothing secret here');
  });

  it('writes nothing below LOG_LEVEL', () => {
    const { logger, lines } = capture('error');
    logger.log('quiet');
    logger.warn('quiet too');
    logger.error('loud');
    expect(lines.map((line) => line.msg)).toEqual(['loud']);
  });

  it('masks configured secrets that have no key shape, in the message, a stack and an error', () => {
    const secret = 'deployment-secret-9fK2xQ7w';
    registerSecrets([secret, 'short']);
    const { logger, lines } = capture();
    const error = new Error(`upstream said: your key is ${secret}`);
    logger.error(`Upstream refused ${secret}`, error.stack, 'Providers');
    logger.error(error);
    logger.warn('With an error', error, 'Providers');
    logger.log('a short value stays: short');
    const written = JSON.stringify(lines);
    expect(written).not.toContain(secret);
    expect(lines[0]).toMatchObject({ msg: 'Upstream refused [redacted]', stack: expect.stringContaining('your key is [redacted]') });
    expect(lines[1]).toMatchObject({ msg: 'upstream said: your key is [redacted]', err: { message: 'upstream said: your key is [redacted]' } });
    expect(lines[3].msg).toBe('a short value stays: short');
  });
});

describe('RedactingConsoleLogger (LOG_FORMAT=pretty)', () => {
  it('masks configured secrets and key shapes in the text lines and stacks it prints', () => {
    const secret = 'pretty-secret-Zt3Lm2Vx8R';
    registerSecrets([secret]);
    const printed: string[] = [];
    const out = jest.spyOn(process.stdout, 'write').mockImplementation((chunk) => (printed.push(String(chunk)), true));
    const err = jest.spyOn(process.stderr, 'write').mockImplementation((chunk) => (printed.push(String(chunk)), true));
    try {
      const logger = new RedactingConsoleLogger({ logLevels: ['log', 'error'] });
      logger.log(`key ${secret} and sk-${'B'.repeat(40)}`, 'Providers');
      const error = new Error(`echoed ${secret}`);
      logger.error(error.message, error.stack, 'Providers');
    } finally {
      out.mockRestore();
      err.mockRestore();
    }
    const text = printed.join('');
    expect(text).toContain('key [redacted] and sk-[redacted]');
    expect(text).toContain('echoed [redacted]');
    expect(text).not.toContain(secret);
    expect(text).not.toContain('BBBBBBBB');
  });
});
