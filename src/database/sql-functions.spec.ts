import { readdirSync, readFileSync } from 'node:fs';
import * as path from 'node:path';
import type { QueryRunner } from 'typeorm';
import { MIGRATIONS } from '../../migrations';

/**
 * The SQL functions the migrations define are kept as source files too (src/<module>/sql/
 * <name>.sql), so that their current text can be read without finding the latest migration
 * that redefined them. Migrations are history and never change; a change to a function is a
 * new migration that applies the edited file's text (see BillingModule, "Changing an SQL
 * function"). These checks keep the two equal, whitespace aside.
 */
const SRC = path.resolve(__dirname, '..');

interface Definition {
  name: string;
  /** `name(type, ...)`: what PostgreSQL tells overloads apart by. */
  signature: string;
  /** From the name to the closing `$$`: `CREATE` or `CREATE OR REPLACE` may come before it. */
  text: string;
  /** The migration or file it comes from. */
  where: string;
}

const CREATE = /^(\s*CREATE\s+(?:OR\s+REPLACE\s+)?FUNCTION\s+)([a-z_][a-z0-9_]*)\s*\(/i;
const DROP = /^\s*DROP\s+FUNCTION\s+(?:IF\s+EXISTS\s+)?([a-z_][a-z0-9_]*)\s*\(([^)]*)\)/i;

/** The SQL each migration's `up` sends, oldest first (migrations only ever call `query`). */
async function migrationStatements(): Promise<{ where: string; sql: string }[]> {
  const statements: { where: string; sql: string }[] = [];
  for (const Migration of MIGRATIONS) {
    const migration = new Migration();
    const where = migration.name ?? Migration.name;
    const recorder = {
      query: async (sql: string) => {
        statements.push({ where, sql });
        return [];
      },
    };
    await migration.up(recorder as unknown as QueryRunner);
  }
  return statements;
}

function normalise(text: string): string {
  return text.replace(/\s+/g, ' ').trim();
}

/** The types of a parameter list, as `DROP FUNCTION` names them (each parameter here has a name). */
function parameterTypes(parameters: string, named: boolean): string[] {
  const types: string[] = [];
  let depth = 0;
  let current = '';
  for (const char of `${parameters},`) {
    if (char === ',' && depth === 0) {
      const words = normalise(current.replace(/\s+DEFAULT\s+[\s\S]*$|\s*=[\s\S]*$/i, '')).split(' ').filter(Boolean);
      current = '';
      if (words.length === 0) continue;
      if (/^(OUT)$/i.test(words[0])) continue;
      if (/^(IN|INOUT|VARIADIC)$/i.test(words[0])) words.shift();
      types.push((named ? words.slice(1) : words).join(' ').toLowerCase());
      continue;
    }
    if (char === '(') depth += 1;
    if (char === ')') depth -= 1;
    current += char;
  }
  return types;
}

/** A `CREATE [OR REPLACE] FUNCTION` statement's function, or null for any other statement. */
function definitionIn(sql: string, where: string): Definition | null {
  const match = CREATE.exec(sql);
  if (!match) return null;
  const name = match[2].toLowerCase();
  const open = match[0].length - 1;
  let depth = 0;
  let close = open;
  for (; close < sql.length; close += 1) {
    if (sql[close] === '(') depth += 1;
    if (sql[close] === ')' && --depth === 0) break;
  }
  const end = sql.lastIndexOf('$$');
  if (end < 0) throw new Error(`${where}: function ${name} has no $$-quoted body`);
  return {
    name,
    signature: `${name}(${parameterTypes(sql.slice(open + 1, close), true).join(', ')})`,
    text: normalise(sql.slice(match.index + match[1].length, end + 2)),
    where,
  };
}

/** The functions defined after every statement ran: the latest definition of each signature, less those dropped. */
function latestDefinitions(statements: { where: string; sql: string }[]): Map<string, Definition> {
  const functions = new Map<string, Definition>();
  for (const { where, sql } of statements) {
    const dropped = DROP.exec(sql);
    if (dropped) functions.delete(`${dropped[1].toLowerCase()}(${parameterTypes(dropped[2], false).join(', ')})`);
    const definition = definitionIn(sql, where);
    if (definition) functions.set(definition.signature, definition);
  }
  return functions;
}

/** Every src/<module>/sql/<name>.sql: one or more `CREATE FUNCTION <name>(...)` statements (overloads). */
function sourceDefinitions(): Map<string, Definition> {
  const sources = new Map<string, Definition>();
  for (const module of readdirSync(SRC, { withFileTypes: true }).filter((entry) => entry.isDirectory())) {
    const folder = path.join(SRC, module.name, 'sql');
    let files: string[];
    try {
      files = readdirSync(folder).filter((file) => file.endsWith('.sql'));
    } catch {
      continue;
    }
    for (const file of files) {
      const where = path.relative(SRC, path.join(folder, file));
      const text = readFileSync(path.join(folder, file), 'utf8');
      const starts = [...text.matchAll(/^CREATE\s+(?:OR\s+REPLACE\s+)?FUNCTION\b/gim)].map((match) => match.index);
      if (starts.length === 0) throw new Error(`${where} defines no function`);
      starts.forEach((start, index) => {
        const definition = definitionIn(text.slice(start, starts[index + 1]), where)!;
        if (`${definition.name}.sql` !== file) throw new Error(`${where} defines ${definition.name}: name the file after it`);
        sources.set(definition.signature, definition);
      });
    }
  }
  return sources;
}

/** What differs between the migrations' functions and the source files, one line each. */
function differences(migrated: Map<string, Definition>, sources: Map<string, Definition>): string[] {
  const found: string[] = [];
  for (const [signature, latest] of migrated) {
    const source = sources.get(signature);
    if (!source) found.push(`${signature}: defined by ${latest.where}, but no src/<module>/sql/${latest.name}.sql defines it`);
    else if (source.text !== latest.text) found.push(`${signature}: ${source.where} differs from its latest migration, ${latest.where}`);
  }
  for (const [signature, source] of sources) {
    if (!migrated.has(signature)) found.push(`${signature}: ${source.where} defines it, but no migration does (or one dropped it)`);
  }
  return found;
}

describe('SQL functions', () => {
  it('each function the migrations define has a source file equal to its latest migration', async () => {
    const migrated = latestDefinitions(await migrationStatements());
    expect(migrated.size).toBeGreaterThanOrEqual(8);
    expect(differences(migrated, sourceDefinitions())).toEqual([]);
  });

  it('reads the latest definition of each overload, and forgets a dropped one', () => {
    const statements = [
      { where: 'First', sql: `CREATE FUNCTION f(p_a text, p_b bigint[]) RETURNS int LANGUAGE sql AS $$ SELECT 1 $$` },
      { where: 'First', sql: `CREATE FUNCTION g(p_a text) RETURNS int LANGUAGE sql AS $$ SELECT 1 $$` },
      { where: 'Second', sql: `CREATE OR REPLACE FUNCTION f(p_a text, p_b bigint[])\n RETURNS int LANGUAGE sql AS $$ SELECT 2 $$` },
      { where: 'Second', sql: `CREATE FUNCTION f(p_a text) RETURNS int LANGUAGE sql AS $$ SELECT 3 $$` },
      { where: 'Third', sql: `DROP FUNCTION IF EXISTS g(text)` },
    ];
    const migrated = latestDefinitions(statements);
    expect([...migrated.keys()].sort()).toEqual(['f(text)', 'f(text, bigint[])']);
    expect(migrated.get('f(text, bigint[])')).toMatchObject({ where: 'Second', text: 'f(p_a text, p_b bigint[]) RETURNS int LANGUAGE sql AS $$ SELECT 2 $$' });

    const source = (sql: string) => definitionIn(sql, 'f.sql')!;
    const upToDate = new Map(['f(text)', 'f(text, bigint[])'].map((signature) => [signature, { ...migrated.get(signature)!, where: 'f.sql' }]));
    expect(differences(migrated, upToDate)).toEqual([]);
    const stale = new Map(upToDate).set('f(text, bigint[])', source(`CREATE FUNCTION f(p_a text, p_b bigint[]) RETURNS int LANGUAGE sql AS $$ SELECT 1 $$;`));
    expect(differences(migrated, stale)).toEqual(['f(text, bigint[]): f.sql differs from its latest migration, Second']);
    const missing = new Map([...upToDate].filter(([signature]) => signature !== 'f(text)'));
    expect(differences(migrated, missing)).toEqual(['f(text): defined by Second, but no src/<module>/sql/f.sql defines it']);
    const extra = new Map(upToDate).set('g(text)', source(`CREATE FUNCTION g(p_a text) RETURNS int LANGUAGE sql AS $$ SELECT 1 $$`));
    expect(differences(migrated, extra)).toEqual(['g(text): f.sql defines it, but no migration does (or one dropped it)']);
  });
});
