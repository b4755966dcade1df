import { readdirSync, readFileSync } from 'node:fs';
import * as path from 'node:path';

/**
 * Which module depends on which is a design decision, not an accident: every import
 * between two top folders of src/ is an edge, and the edges must form no cycle. A cycle
 * means two modules that can only be understood, tested and changed together.
 */
const SRC = __dirname;

function sourceFiles(folder: string): string[] {
  return readdirSync(folder, { withFileTypes: true }).flatMap((entry) => {
    const full = path.join(folder, entry.name);
    if (entry.isDirectory()) return sourceFiles(full);
    return entry.name.endsWith('.ts') && !entry.name.endsWith('.spec.ts') ? [full] : [];
  });
}

/** `src/<top>/...` -> `<top>`; files directly in src/ (main, cli, app.module) are the composition root. */
function topFolder(file: string): string | null {
  const parts = path.relative(SRC, file).split(path.sep);
  return parts.length > 1 && parts[0] !== '..' ? parts[0] : null;
}

/** from -> to -> one import that makes the edge (to name it in a failure). */
function folderGraph(): Map<string, Map<string, string>> {
  const graph = new Map<string, Map<string, string>>();
  for (const file of sourceFiles(SRC)) {
    const from = topFolder(file);
    if (!from) continue;
    for (const match of readFileSync(file, 'utf8').matchAll(/(?:import|export)\s[^'";]*?from\s+['"](\.[^'"]+)['"]/g)) {
      const to = topFolder(path.resolve(path.dirname(file), match[1]));
      if (!to || to === from) continue;
      const edges = graph.get(from) ?? new Map<string, string>();
      if (!edges.has(to)) edges.set(to, `${path.relative(SRC, file)} imports ${match[1]}`);
      graph.set(from, edges);
    }
  }
  return graph;
}

/** Strongly connected components with more than one folder (Tarjan). */
function cyclicGroups(graph: Map<string, Map<string, string>>): string[][] {
  const index = new Map<string, number>();
  const low = new Map<string, number>();
  const stack: string[] = [];
  const groups: string[][] = [];
  const visit = (folder: string): void => {
    index.set(folder, index.size);
    low.set(folder, index.get(folder)!);
    stack.push(folder);
    for (const next of graph.get(folder)?.keys() ?? []) {
      if (!index.has(next)) {
        visit(next);
        low.set(folder, Math.min(low.get(folder)!, low.get(next)!));
      } else if (stack.includes(next)) {
        low.set(folder, Math.min(low.get(folder)!, index.get(next)!));
      }
    }
    if (low.get(folder) === index.get(folder)) {
      const group: string[] = [];
      let member: string;
      do {
        member = stack.pop()!;
        group.push(member);
      } while (member !== folder);
      if (group.length > 1) groups.push(group.sort());
    }
  };
  for (const folder of graph.keys()) if (!index.has(folder)) visit(folder);
  return groups;
}

describe('module boundaries', () => {
  it('has no import cycle between the top folders of src/', () => {
    const graph = folderGraph();
    expect(graph.size).toBeGreaterThan(10);
    const cycles = cyclicGroups(graph).map((group) =>
      group
        .flatMap((from) => group.filter((to) => graph.get(from)?.has(to)).map((to) => `${from} -> ${to} (${graph.get(from)!.get(to)})`))
        .join('; '),
    );
    expect(cycles).toEqual([]);
  });

  it('finds a cycle when there is one', () => {
    const graph = new Map([
      ['a', new Map([['b', 'x']])],
      ['b', new Map([['c', 'y']])],
      ['c', new Map([['a', 'z']])],
      ['d', new Map([['a', 'w']])],
    ]);
    expect(cyclicGroups(graph)).toEqual([['a', 'b', 'c']]);
  });
});
