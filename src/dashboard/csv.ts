import type { Response } from 'express';

export type CsvValue = string | number | bigint | boolean | null | undefined;

/** A plain decimal number, written as it is (a negative amount is not a formula). */
const NUMBER = /^-?\d+(\.\d+)?$/;
/** What a spreadsheet would run as a formula at the start of a cell. */
const FORMULA_START = /^[=+\-@\t\r]/;

/**
 * One CSV field (RFC 4180): quoted when it holds a comma, a quote or a line break, quotes
 * doubled. Text that a spreadsheet would run as a formula (`=HYPERLINK(...)`, `+1`, `@SUM`)
 * gets a leading apostrophe, since names and user ids come from API callers.
 */
export function csvField(value: CsvValue): string {
  if (value === null || value === undefined) return '';
  let text = String(value);
  if (typeof value === 'string' && !NUMBER.test(text) && FORMULA_START.test(text)) text = `'${text}`;
  return /[",\r\n]/.test(text) ? `"${text.replace(/"/g, '""')}"` : text;
}

/** One line of fields, ended by CRLF as RFC 4180 has it. */
export function csvLine(values: CsvValue[]): string {
  return `${values.map(csvField).join(',')}\r\n`;
}

/**
 * Streams rows as a CSV download: the header line first, then each row as the generator
 * yields it, waiting whenever the client reads slower than the rows come.
 */
export async function sendCsv<T>(
  res: Response,
  filename: string,
  header: string[],
  rows: AsyncIterable<T>,
  toLine: (row: T) => CsvValue[],
): Promise<void> {
  res.status(200);
  res.setHeader('Content-Type', 'text/csv; charset=utf-8');
  res.setHeader('Content-Disposition', `attachment; filename="${filename.replace(/[^\w.-]/g, '_')}"`);
  res.setHeader('Cache-Control', 'no-store');
  res.write(csvLine(header));
  for await (const row of rows) {
    if (!res.write(csvLine(toLine(row)))) await new Promise<void>((resolve) => res.once('drain', resolve));
  }
  res.end();
}
