import { createHash } from 'node:crypto';
import { readFileSync } from 'node:fs';
import * as path from 'node:path';
import { gzipSync } from 'node:zlib';

/** The script every embedding page loads, as served: its text, gzipped, and an ETag of it. */
export interface WidgetScript {
  body: Buffer;
  gzipped: Buffer;
  etag: string;
}

/**
 * Builds `widget.js` from two hand-written files: the dashboard's escape-first Markdown
 * renderer (one renderer for the playground, the transcripts and the widget) and the widget
 * itself, in one function scope so that neither leaves a global on the host page (the
 * renderer's UMD wrapper sees a local `module` and exports into it). Read once, at start.
 */
export function buildWidgetScript(): WidgetScript {
  const markdown = compact(readFileSync(path.join(__dirname, '..', 'dashboard', 'assets', 'markdown.js'), 'utf8'));
  const widget = compact(readFileSync(path.join(__dirname, 'assets', 'widget.js'), 'utf8'));
  const text =
    '/*! Assistant Chat Service chat widget */\n(function () {\nvar module = { exports: {} };\n' +
    `${markdown}\nvar SafeMarkdown = module.exports;\n${widget}\n})();\n`;
  const body = Buffer.from(text, 'utf8');
  return {
    body,
    gzipped: gzipSync(body, { level: 9 }),
    etag: `"${createHash('sha256').update(body).digest('base64url').slice(0, 27)}"`,
  };
}

/**
 * Drops what only readers of the source need: whole-line `//` comments, indentation and
 * blank lines (neither file has a multi-line string). No minifier: what runs is what was written.
 */
function compact(source: string): string {
  return source
    .split('\n')
    .map((line) => line.trim())
    .filter((line) => line !== '' && !line.startsWith('//'))
    .join('\n');
}
