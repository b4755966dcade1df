import { readdirSync, readFileSync } from 'node:fs';
import * as path from 'node:path';

/**
 * Where data access lives (CONTRIBUTING.md): a module's statements are in its store files
 * (`*-store.ts`), SQL functions in `src/**\/sql/`, schema changes in migrations. A service
 * that runs SQL beside its rules fails here, unless it is named below with why it still does.
 */
const SRC = __dirname;

/** Running a statement: raw SQL, the raw-rows helpers, or TypeORM's query builder. */
const RUNS_SQL = /\.query\s*[<(]|\bqueryRows\s*[<(]|\bpreparedRows\s*[<(]|\bcreateQueryBuilder\s*\(/;

/**
 * Files that still run statements outside a store, each with why. Shrink it: a file that no
 * longer runs any fails the spec until its entry is removed.
 */
const NOT_YET_IN_A_STORE: Record<string, string> = {
  // The database itself, not a module's tables.
  'common/database/query-rows.ts': 'the helper stores call for the rows of a raw statement',
  'common/database/prepared-rows.ts': 'the helper stores call for a named prepared statement',
  'common/database/savepoint.ts': 'savepoints of the caller\'s transaction, no table',
  'database/data-source.ts': 'the migration lock (an advisory lock), no table',
  'database/embedded-postgres.ts': 'creates the database of the embedded server, before any table',
  'health/database-probe.ts': 'SELECT 1 on its own connection: the probe of the database, no table',
  // Modules whose moves are in other hands now (issue 44, item 4).
  'assistants/documents/documents.service.ts': 'documents: moves after the retrieval work lands',
  'assistants/documents/lexical-search.ts': 'documents: the search statements join a documents store with the rest',
  'assistants/documents/dense-search.ts': 'documents: the vector statements join a documents store with the rest',
  'assistants/documents/document-embeddings.ts': 'documents: the embedding batches join a documents store with the rest',
  'assistants/assistants.service.ts': 'assistants: moves with the documents store',
  'providers/routing/deployment-health-reporter.ts': 'providers: under change in its own branch',
  'wallet/wallet.service.ts': 'wallet: moves into wallet-store.ts in its own branch',
  'wallet/wallet-leases.ts': 'wallet: moves into wallet-store.ts in its own branch',
  'wallet/wallet-metrics.ts': 'wallet: moves into wallet-store.ts in its own branch',
  'wallet/auto-topup-attempts.ts': 'wallet: moves into wallet-store.ts in its own branch',
  'wallet/auto-topup-settings.service.ts': 'wallet: moves into wallet-store.ts in its own branch',
  'wallet/ledger-query.service.ts': 'wallet: moves into wallet-store.ts in its own branch',
  'widget/widget-spending.service.ts': 'widget: under change in its own branch',
  'widget/widgets.service.ts': 'widget: under change in its own branch',
  'billing/billing.ts': 'names the database a settlement journal belongs to (pg_control_system), no table',
  // Not moved yet.
  'usage/usage.service.ts': "usage: the insert of a record without a settlement; moves to usage-records-store.ts (and that spec's fake)",
};

function sourceFiles(folder: string): string[] {
  return readdirSync(folder, { withFileTypes: true }).flatMap((entry) => {
    const full = path.join(folder, entry.name);
    if (entry.isDirectory()) return sourceFiles(full);
    return entry.name.endsWith('.ts') && !entry.name.endsWith('.spec.ts') ? [full] : [];
  });
}

/** Where statements belong: a store, an SQL function's folder, a migration. */
function isDataAccessFile(relative: string): boolean {
  const parts = relative.split('/');
  return relative.endsWith('-store.ts') || parts.includes('sql') || parts.includes('migrations');
}

/** `file:line` of each line that runs a statement; comment lines do not count. */
function statementsIn(file: string): string[] {
  return readFileSync(file, 'utf8')
    .split('\n')
    .flatMap((line, index) => {
      const code = line.trim();
      if (code.startsWith('//') || code.startsWith('*') || code.startsWith('/*')) return [];
      return RUNS_SQL.test(line) ? [`${index + 1}: ${code}`] : [];
    });
}

/** src-relative path (with `/`) -> the lines that run statements, for files outside the stores. */
function statementsOutsideStores(): Map<string, string[]> {
  const found = new Map<string, string[]>();
  for (const file of sourceFiles(SRC)) {
    const relative = path.relative(SRC, file).split(path.sep).join('/');
    if (isDataAccessFile(relative)) continue;
    const lines = statementsIn(file);
    if (lines.length > 0) found.set(relative, lines);
  }
  return found;
}

describe('stores boundary', () => {
  const found = statementsOutsideStores();

  it('finds statements where they belong (the check is looking at the right files)', () => {
    const inStores = sourceFiles(SRC).filter((file) => file.endsWith('-store.ts') && statementsIn(file).length > 0);
    expect(inStores.length).toBeGreaterThan(10);
  });

  it('runs no SQL outside a store, src/**/sql/ or a migration, except the files named with why', () => {
    const offenders = [...found]
      .filter(([file]) => !(file in NOT_YET_IN_A_STORE))
      .map(([file, lines]) => `src/${file} (move these into the module's *-store.ts):\n    ${lines.join('\n    ')}`);
    expect(offenders).toEqual([]);
  });

  it('names no file that runs no SQL any more (remove it from NOT_YET_IN_A_STORE)', () => {
    const stale = Object.keys(NOT_YET_IN_A_STORE).filter((file) => !found.has(file));
    expect(stale).toEqual([]);
  });
});
