import { parseFiles } from './document-upload';

/** A form as fetch serialises it (the same encoding as browsers): its bytes and Content-Type. */
async function encoded(form: FormData): Promise<{ body: Buffer; contentType: string }> {
  const request = new Request('http://localhost/', { method: 'POST', body: form });
  return { body: Buffer.from(await request.arrayBuffer()), contentType: request.headers.get('content-type')! };
}

/** What Node's own parser (undici's formData) makes of the same body: the reference. */
async function reference(body: Buffer, contentType: string): Promise<Array<{ name: string; mimeType: string; data: string }>> {
  const form = await new Response(body, { headers: { 'content-type': contentType } }).formData();
  const files: Array<{ name: string; mimeType: string; data: string }> = [];
  for (const [name, value] of form) {
    if (name === 'files' && typeof value !== 'string' && (value.name || value.size > 0)) {
      files.push({ name: value.name, mimeType: value.type, data: Buffer.from(await value.arrayBuffer()).toString('base64') });
    }
  }
  return files;
}

const parsed = (body: Buffer, contentType: string) =>
  parseFiles(body, contentType).map((file) => ({ name: file.name, mimeType: file.mimeType, data: file.data.toString('base64') }));

describe('parseFiles (the multipart parser of dashboard uploads)', () => {
  it('reads what fetch and browsers send exactly as Node’s own parser does, without copying the data', async () => {
    const binary = Buffer.from('\r\n--\r\n\r\n--boundary\r\n\x00\xff', 'latin1');
    const form = new FormData();
    form.append('_csrf', 'token-value');
    form.append('files', new Blob(['Hello, world.']), 'notes.txt');
    form.append('files', new Blob([binary], { type: 'application/PDF' }), 'a "quoted"\nname.pdf');
    form.append('files', new Blob(['Grüße'], { type: 'text/markdown' }), 'Übersicht – 2024.md');
    form.append('files', new Blob([]), 'empty.txt');
    form.append('other', 'ignored');
    const { body, contentType } = await encoded(form);
    const files = parsed(body, contentType);
    expect(files).toEqual(await reference(body, contentType));
    expect(files.map((file) => file.name)).toEqual(['notes.txt', 'a "quoted"\nname.pdf', 'Übersicht – 2024.md', 'empty.txt']);
    expect(Buffer.from(files[1].data, 'base64').equals(binary)).toBe(true);
    expect(parseFiles(body, contentType)[0].data.buffer).toBe(body.buffer);
  });

  it('skips the empty part of a form posted with no file chosen', async () => {
    const body = Buffer.from(
      '--b\r\nContent-Disposition: form-data; name="_csrf"\r\n\r\nt\r\n' +
        '--b\r\nContent-Disposition: form-data; name="files"; filename=""\r\nContent-Type: application/octet-stream\r\n\r\n\r\n--b--\r\n',
    );
    expect(parseFiles(body, 'multipart/form-data; boundary=b')).toEqual([]);
    expect(await reference(body, 'multipart/form-data; boundary=b')).toEqual([]);
  });

  it('refuses a body that is not well-formed multipart', () => {
    const type = 'multipart/form-data; boundary=b';
    const part = '--b\r\nContent-Disposition: form-data; name="files"; filename="a.txt"\r\n\r\nabc';
    expect(() => parseFiles(Buffer.from(`${part}\r\n--b--\r\n`), 'multipart/form-data')).toThrow('No multipart boundary');
    expect(() => parseFiles(Buffer.from('no parts at all'), type)).toThrow('No multipart part');
    expect(() => parseFiles(Buffer.from(part), type)).toThrow('cut off');
    expect(() => parseFiles(Buffer.from(`--b\r\n${'X-Long: header\r\n'.repeat(400)}\r\nabc\r\n--b--`), type)).toThrow('too long headers');
    expect(() => parseFiles(Buffer.from(`${`${part}\r\n`.repeat(101)}--b--\r\n`), type)).toThrow('Too many parts');
    expect(parseFiles(Buffer.from(`${`${part}\r\n`.repeat(3)}--b--\r\n`), type)).toHaveLength(3);
  });
});
