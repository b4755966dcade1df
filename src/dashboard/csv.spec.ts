import { csvField, csvLine } from './csv';

describe('CSV fields', () => {
  it('leaves plain values alone and writes nothing for null', () => {
    expect(csvLine(['usage', -1337, 'API usage', null, undefined, 12.5])).toBe('usage,-1337,API usage,,,12.5\r\n');
  });

  it('quotes commas, quotes and line breaks, doubling the quotes', () => {
    expect(csvField('a, b')).toBe('"a, b"');
    expect(csvField('say "hi"')).toBe('"say ""hi"""');
    expect(csvField('two\nlines')).toBe('"two\nlines"');
    expect(csvField('cr\r')).toBe('"cr\r"');
  });

  it('keeps spreadsheets from running text as a formula, but not numbers', () => {
    expect(csvField('=HYPERLINK("http://x")')).toBe('"\'=HYPERLINK(""http://x"")"');
    expect(csvField('+1')).toBe("'+1");
    expect(csvField('@SUM(A1)')).toBe("'@SUM(A1)");
    expect(csvField('-1337')).toBe('-1337');
    expect(csvField('-12.500000')).toBe('-12.500000');
    expect(csvField(-5)).toBe('-5');
  });
});
