import { mkdtempSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import * as path from 'node:path';
import type { AppConfig } from './app-config';
import { sessionSecret } from './session-secret';

describe('sessionSecret', () => {
  let dir: string;
  beforeEach(() => (dir = mkdtempSync(path.join(tmpdir(), 'acs-secret-'))));
  afterEach(() => rmSync(dir, { recursive: true, force: true }));
  const config = (overrides: Partial<AppConfig> = {}) => ({ dataDir: path.join(dir, 'data'), ...overrides }) as AppConfig;

  it('uses SESSION_SECRET when set, and writes nothing', () => {
    const secret = 'x'.repeat(40);
    expect(sessionSecret(config({ sessionSecret: secret }))).toBe(secret);
    expect(() => statSync(path.join(dir, 'data'))).toThrow();
  });

  it('generates a secret once into DATA_DIR, readable by its owner only, and keeps it across starts', () => {
    const first = sessionSecret(config());
    expect(first.length).toBeGreaterThanOrEqual(32);
    const file = path.join(dir, 'data', 'session-secret');
    expect(readFileSync(file, 'utf8').trim()).toBe(first);
    expect(statSync(file).mode & 0o777).toBe(0o600);
    expect(sessionSecret(config())).toBe(first);
  });

  it('falls back to a secret of this process, with a warning, when DATA_DIR cannot be written', () => {
    // A file where DATA_DIR should be: nobody, root included, can create a file in it.
    const notADirectory = path.join(dir, 'not-a-dir');
    writeFileSync(notADirectory, '');
    const secret = sessionSecret(config({ dataDir: notADirectory }));
    expect(secret.length).toBeGreaterThanOrEqual(32);
    // Nothing was kept: the next process gets another secret.
    expect(sessionSecret(config({ dataDir: notADirectory }))).not.toBe(secret);
  });
});
