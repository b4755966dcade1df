import { readFileSync } from 'node:fs';
import * as path from 'node:path';
import { loadConfig, UPSTREAM_PROVIDERS } from './app-config';

/**
 * `.env.example` is where an operator learns what can be set, and docs/operations.md says
 * what each variable means: both must name every variable `loadConfig` reads. The list is
 * taken from the source of app-config.ts, so a variable added there fails this spec until
 * it is documented.
 */
const ROOT = path.resolve(__dirname, '../..');
const SOURCE = readFileSync(path.join(__dirname, 'app-config.ts'), 'utf8');

/** Variables named literally (`read.integer('PORT', ...)`) or built from a provider prefix (`${prefix}_API_KEY`). */
function variablesReadBySource(): string[] {
  const literal = [...SOURCE.matchAll(/\bread\.\w+\(\s*'([A-Z][A-Z0-9_]*)'/g)].map((m) => m[1]);
  const suffixes = [...SOURCE.matchAll(/\bread\.\w+\(\s*`\$\{prefix\}(_[A-Z0-9_]+)`/g)].map((m) => m[1]);
  const templated = UPSTREAM_PROVIDERS.flatMap(([, prefix]) => suffixes.map((suffix) => `${prefix}${suffix}`));
  return [...new Set([...literal, ...templated])].sort();
}

/** `NAME=value` lines; the Compose-only section at the end is not read by the service. */
function exampleFile(): { service: string[]; composeOnly: string[] } {
  const text = readFileSync(path.join(ROOT, '.env.example'), 'utf8');
  const [service, composeOnly = ''] = text.split(/^# --- docker compose only.*$/m);
  const names = (part: string) => [...part.matchAll(/^([A-Z][A-Z0-9_]*)=/gm)].map((m) => m[1]);
  return { service: names(service), composeOnly: names(composeOnly) };
}

describe('.env.example and the configuration docs', () => {
  const read = variablesReadBySource();

  it('finds every variable app-config.ts names (the scan misses no way of reading one)', () => {
    // Every upper-case string literal of the file is a variable read by name or a provider prefix.
    const prefixes = new Set<string>(UPSTREAM_PROVIDERS.map(([, prefix]) => prefix));
    const literals = new Set([...SOURCE.matchAll(/'([A-Z][A-Z0-9_]+)'/g)].map((m) => m[1]));
    const unexplained = [...literals].filter((name) => !prefixes.has(name) && !read.includes(name));
    expect(unexplained).toEqual([]);
    expect(read).toEqual(expect.arrayContaining(['DATABASE_URL', 'OPENAI_API_KEY', 'GEMINI_BASE_URL', 'SETTLEMENT_DURABILITY']));

    // And what loadConfig actually asks the environment for is within that list.
    const asked = new Set<string>();
    const env = new Proxy({} as Record<string, string | undefined>, {
      get: (_target, key) => {
        if (typeof key === 'string') asked.add(key);
        return undefined;
      },
    });
    loadConfig(env);
    expect([...asked].filter((name) => !read.includes(name))).toEqual([]);
  });

  it('lists every variable loadConfig reads, and none it does not', () => {
    const { service } = exampleFile();
    expect(read.filter((name) => !service.includes(name))).toEqual([]);
    expect(service.filter((name) => !read.includes(name))).toEqual([]);
    expect(service.length).toBe(new Set(service).size);
  });

  it('gives every variable a row of the configuration table in docs/operations.md', () => {
    const operations = readFileSync(path.join(ROOT, 'docs/operations.md'), 'utf8');
    const rows = operations.split('\n').filter((line) => line.startsWith('| `'));
    const documented = new Set(rows.flatMap((row) => [...row.split('|')[1].matchAll(/`([A-Z][A-Z0-9_]*)`/g)].map((m) => m[1])));
    expect(read.filter((name) => !documented.has(name))).toEqual([]);
  });
});
