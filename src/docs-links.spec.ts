import { existsSync, readdirSync, readFileSync, statSync } from 'node:fs';
import * as path from 'node:path';

/**
 * The docs link to each other and to the code by relative paths and `#heading` anchors. A
 * file moved or a heading renamed breaks those links without any other test noticing; this
 * one fails on the first of them, naming the document and the link.
 */
const ROOT = path.resolve(__dirname, '..');

function markdownFiles(): string[] {
  const inFolder = (folder: string) =>
    existsSync(path.join(ROOT, folder))
      ? readdirSync(path.join(ROOT, folder))
          .filter((name) => name.endsWith('.md'))
          .map((name) => path.join(folder, name))
      : [];
  return ['README.md', 'CONTRIBUTING.md', ...inFolder('docs'), ...inFolder('bench')].filter((file) => existsSync(path.join(ROOT, file)));
}

/** The text outside fenced code blocks (links in code are examples, not links). */
function prose(markdown: string): string {
  return markdown.replace(/^(```|~~~)[^\n]*\n[\s\S]*?^\1[^\n]*$/gm, '');
}

/** GitHub's anchor for a heading: its text lower-cased, punctuation dropped, spaces to hyphens. */
function githubSlug(heading: string): string {
  const text = heading
    .replace(/!?\[([^\]]*)\]\([^)]*\)/g, '$1') // a link's text
    .replace(/`([^`]*)`/g, '$1') // code spans keep their text
    .replace(/<[^>]+>/g, ''); // inline HTML
  return text
    .trim()
    .toLowerCase()
    .replace(/[^\p{L}\p{N}\p{M} _-]/gu, '')
    .replace(/ /g, '-');
}

/** Every heading's anchor in a Markdown file, with GitHub's -1, -2 for repeated ones. */
function anchorsOf(markdown: string): Set<string> {
  const anchors = new Set<string>();
  const seen = new Map<string, number>();
  for (const match of prose(markdown).matchAll(/^#{1,6}[ \t]+(.+?)[ \t#]*$/gm)) {
    const slug = githubSlug(match[1]);
    const count = seen.get(slug) ?? 0;
    anchors.add(count === 0 ? slug : `${slug}-${count}`);
    seen.set(slug, count + 1);
  }
  return anchors;
}

/** Links `[text](target)` and images `![alt](target)` that point inside the repository. */
function relativeLinks(markdown: string): string[] {
  const targets = [...prose(markdown).matchAll(/!?\[(?:[^\]\\]|\\.)*\]\(\s*<?([^)\s>]+)>?(?:\s+"[^"]*")?\s*\)/g)].map((m) => m[1]);
  return targets.filter((target) => !/^[a-z][a-z0-9+.-]*:/i.test(target));
}

function brokenLinks(file: string): string[] {
  const markdown = readFileSync(path.join(ROOT, file), 'utf8');
  const broken: string[] = [];
  for (const link of relativeLinks(markdown)) {
    const [target, anchor] = link.split('#', 2) as [string, string | undefined];
    const resolved = target === '' ? path.join(ROOT, file) : path.resolve(path.dirname(path.join(ROOT, file)), decodeURIComponent(target));
    if (!resolved.startsWith(ROOT) || !existsSync(resolved)) {
      broken.push(`${file}: ${link} (no such file)`);
      continue;
    }
    if (anchor === undefined || anchor === '') continue;
    if (!resolved.endsWith('.md') || statSync(resolved).isDirectory()) {
      if (!/^L\d+(-L\d+)?$/.test(anchor)) broken.push(`${file}: ${link} (an anchor in a file that is not Markdown)`);
      continue;
    }
    if (!anchorsOf(readFileSync(resolved, 'utf8')).has(decodeURIComponent(anchor).toLowerCase())) {
      broken.push(`${file}: ${link} (no heading #${anchor} in ${path.relative(ROOT, resolved)})`);
    }
  }
  return broken;
}

describe('links in the Markdown docs', () => {
  it("computes GitHub's anchors", () => {
    expect(githubSlug('chat.ts: throughput and added latency of the chat path')).toBe('chatts-throughput-and-added-latency-of-the-chat-path');
    expect(githubSlug('Adding a payment provider, a tier rule or a tier')).toBe('adding-a-payment-provider-a-tier-rule-or-a-tier');
    expect(githubSlug('Dashboard pages at a million usage records (`bench/dashboard-pages.ts`)')).toBe(
      'dashboard-pages-at-a-million-usage-records-benchdashboard-pagests',
    );
    expect([...anchorsOf('# A\n## Results\n```\n## Not a heading\n```\n### Results\n')]).toEqual(['a', 'results', 'results-1']);
  });

  it('finds the documents it checks', () => {
    expect(markdownFiles()).toEqual(expect.arrayContaining(['README.md', 'CONTRIBUTING.md', 'docs/api.md', 'bench/README.md']));
  });

  it.each(markdownFiles())('%s links only to files and headings that exist', (file) => {
    expect(brokenLinks(file)).toEqual([]);
  });
});
