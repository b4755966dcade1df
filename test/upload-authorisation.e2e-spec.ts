import * as http from 'node:http';
import { setTimeout as sleep } from 'node:timers/promises';
import { DataSource } from 'typeorm';
import { MembersService } from '../src/accounts/members.service';
import { DocumentIngestion } from '../src/assistants/documents/document-ingestion';
import { DocumentsService } from '../src/assistants/documents/documents.service';
import { DocumentUploads, MAX_UPLOAD_BYTES, UPLOAD_BUSY_RETRY_AFTER_SECONDS } from '../src/dashboard/assistants/document-upload';
import { WorkspacesService } from '../src/workspaces/workspaces.service';
import { DashboardClient, signUp, SignedUpPerson, textOf } from './support/dashboard-client';
import { startTestApp, TestApp } from './support/test-app';

jest.setTimeout(120_000);

const MB = 1024 * 1024;
/** What the client may have sent before a refusal that read nothing: the socket buffers, a little pacing. */
const READ_NOTHING_BOUND = 5 * MB;

/**
 * Document uploads are authorised before their body is read (issue 29): the session, the
 * workspace membership and the role are checked by DashboardGuard while the body waits in
 * the socket, and a refusal closes the connection instead of draining it. Bodies are
 * streamed by hand (http.request, a chunk at a time) so the test sees how much had been sent
 * when the answer came, and the app runs in this process, so its memory is this process's.
 */
describe('uploads authorised before they are read', () => {
  let t: TestApp;
  let owner: SignedUpPerson;
  let stranger: SignedUpPerson;
  let member: SignedUpPerson;
  let docsPath: string;
  let strangerDocsPath: string;

  beforeAll(async () => {
    // Three at once per process, so the process's bound is reached with two workspaces.
    t = await startTestApp({ config: { llmSimulator: 'on', simulatorWordDelayMs: 0, uploads: { perWorkspace: 2, perProcess: 3 } } });
    owner = await signUp(t.baseUrl, { email: 'olive@example.com', name: 'Olive Owner' });
    await t.app.get(WorkspacesService).setTier(owner.workspaceId, 'pro');
    docsPath = `/w/${owner.workspaceId}/assistants/${await createAssistant(owner, 'handbook')}/documents`;
    stranger = await signUp(t.baseUrl, { email: 'sid@example.com', name: 'Sid Stranger' });
    await t.app.get(WorkspacesService).setTier(stranger.workspaceId, 'pro');
    strangerDocsPath = `/w/${stranger.workspaceId}/assistants/${await createAssistant(stranger, 'own')}/documents`;
    const [{ id: ownerId }] = (await t.app.get(DataSource).query('SELECT id FROM users WHERE email = $1', [owner.email])) as { id: string }[];
    const invitation = await t.app.get(MembersService).invite(owner.workspaceId, 'milo@example.com', 'member', ownerId);
    member = await signUp(t.baseUrl, { email: 'milo@example.com', name: 'Milo Member', invitation: invitation.token });
    // Each client's CSRF token, from a page of its own session.
    for (const person of [owner, stranger, member]) await person.client.get(`/w/${person.workspaceId}`);
  });
  afterAll(async () => {
    await t?.app.get(DocumentIngestion).idle();
    await t?.close();
  });

  async function createAssistant(person: SignedUpPerson, slug: string): Promise<string> {
    const path = `/w/${person.workspaceId}/assistants`;
    await person.client.get(`${path}/new`);
    const created = await person.client.post(path, {
      name: slug,
      slug,
      description: '',
      system_prompt: 'You answer briefly.',
      model: 'gpt-4o-mini',
      temperature: '0.3',
      max_tokens: '',
      max_tool_iterations: '4',
      tool_file_search: 'on',
    });
    expect(created.status).toBe(303);
    return created.location!.split('/').pop()!;
  }

  const documents = (assistantPath: string) => t.app.get(DocumentsService).list(assistantPath.split('/')[4]);

  it('a signed-in stranger POSTing 60 MB to another workspace gets 404 before the body is read; memory does not grow by the bodies', async () => {
    // Warm up the path (and its code) once, so what follows measures bodies, not first use.
    expect((await streamUpload(stranger.client, docsPath, { fileBytes: 2 * MB }).answer).status).toBe(404);
    global.gc?.();
    const rssBefore = process.memoryUsage().rss;
    let rssPeak = rssBefore;
    const sampler = setInterval(() => (rssPeak = Math.max(rssPeak, process.memoryUsage().rss)), 10);
    const uploads = Array.from({ length: 4 }, (_, i) =>
      // Half of them with the token in the form (read before the guard), half as a header (nothing read).
      streamUpload(stranger.client, docsPath, { fileBytes: 60 * MB - 1024, token: i % 2 ? 'header' : 'form' }),
    );
    const answers = await Promise.all(uploads.map((upload) => upload.answer));
    clearInterval(sampler);
    const growth = rssPeak - rssBefore;
    console.log(
      `4 stranger uploads of ${(uploads[0].totalBytes / MB).toFixed(1)} MB: sent before the answer ${answers.map((a) => `${(a.sentAtAnswer / MB).toFixed(2)} MB`).join(', ')}; RSS peak growth ${(growth / MB).toFixed(1)} MB`,
    );
    for (const answer of answers) {
      expect(answer.status).toBe(404);
      expect(answer.headers.connection).toBe('close');
      expect(answer.sentAtAnswer).toBeLessThan(READ_NOTHING_BOUND);
    }
    // The four bodies are 240 MB; buffered, even one of them would be 60 MB.
    expect(growth).toBeLessThan(60 * MB);
    expect(await documents(docsPath)).toEqual([]);

    // A client that goes on writing after the answer finds the connection closed: the server does not drain the body.
    const persistent = streamUpload(stranger.client, docsPath, { fileBytes: 60 * MB - 1024, keepWriting: true, pauseMs: 0 });
    expect((await persistent.answer).status).toBe(404);
    const sentAtClose = await persistent.closed;
    console.log(`a stranger writing on after the 404: the connection closed after ${(sentAtClose / MB).toFixed(2)} MB of ${(persistent.totalBytes / MB).toFixed(0)} MB`);
    // (What the kernels buffer on both sides is sent before the client notices: a few MB on loopback.)
    expect(sentAtClose).toBeLessThan(persistent.totalBytes / 4);
  });

  it('a member without the admin role gets 403, and no one signed in gets 403 (the CSRF check), before the body is read', async () => {
    const asMember = await streamUpload(member.client, docsPath, { fileBytes: 60 * MB - 1024 }).answer;
    expect(asMember.status).toBe(403);
    expect(textOf(asMember.html)).toContain('This needs the admin role; yours is member.');
    expect(asMember.sentAtAnswer).toBeLessThan(READ_NOTHING_BOUND);

    const anonymous = await streamUpload(new DashboardClient(t.baseUrl), docsPath, { fileBytes: 60 * MB - 1024 }).answer;
    expect(anonymous.status).toBe(403);
    expect(anonymous.sentAtAnswer).toBeLessThan(READ_NOTHING_BOUND);
    expect(await documents(docsPath)).toEqual([]);
  });

  it('an upload over the limit is cut at the limit, with the message, before the rest is sent', async () => {
    // Chunked, no Content-Length: the server finds out only by counting what it reads.
    const chunked = streamUpload(owner.client, docsPath, { fileBytes: 100 * MB, chunked: true, scripted: true, pauseMs: 0 });
    const cut = await chunked.answer;
    console.log(`chunked upload of 100 MB: answered after ${(cut.sentAtAnswer / MB).toFixed(1)} MB (limit ${MAX_UPLOAD_BYTES / MB} MB)`);
    expect(cut.status).toBe(413);
    expect(textOf(cut.html)).toContain('An upload may be at most 60 MB in all: upload fewer files at a time.');
    expect(cut.sentAtAnswer).toBeGreaterThan(MAX_UPLOAD_BYTES - READ_NOTHING_BOUND);
    expect(cut.sentAtAnswer).toBeLessThan(MAX_UPLOAD_BYTES + 20 * MB);

    // A declared length over the limit is refused before any of the body is read.
    const declared = await streamUpload(owner.client, docsPath, { fileBytes: 100 * MB, scripted: true }).answer;
    expect(declared.status).toBe(413);
    expect(textOf(declared.html)).toContain('An upload may be at most 60 MB in all');
    expect(declared.sentAtAnswer).toBeLessThan(READ_NOTHING_BOUND);
    expect(await documents(docsPath)).toEqual([]);
  });

  it('a third upload to a workspace receiving two is refused at once (429, Retry-After); past the process bound too', async () => {
    const uploads = t.app.get(DocumentUploads);
    const held = [0, 1].map((i) => streamUpload(owner.client, docsPath, { fileBytes: 3 * MB, scripted: true, holdAfter: MB, fileName: `held-${i}.txt` }));
    await until(() => uploads.receivingFor(owner.workspaceId) === 2);

    const third = await streamUpload(owner.client, docsPath, { fileBytes: 3 * MB, scripted: true, fileName: 'third.txt' }).answer;
    expect(third.status).toBe(429);
    expect(third.headers['retry-after']).toBe(String(UPLOAD_BUSY_RETRY_AFTER_SECONDS));
    expect(textOf(third.html)).toContain('This workspace already has 2 uploads on the way (at most 2 at a time)');
    expect(third.sentAtAnswer).toBeLessThan(READ_NOTHING_BOUND);
    // A person's form gets the page with the message.
    const byForm = await streamUpload(owner.client, docsPath, { fileBytes: 3 * MB, fileName: 'form.txt' }).answer;
    expect(byForm.status).toBe(303);
    expect(textOf((await owner.client.get(byForm.headers.location!)).html)).toContain('This workspace already has 2 uploads on the way');

    // Another workspace takes the process's third slot; its second upload finds none left.
    const other = streamUpload(stranger.client, strangerDocsPath, { fileBytes: 3 * MB, scripted: true, holdAfter: MB, fileName: 'other.txt' });
    await until(() => uploads.receivingFor(stranger.workspaceId) === 1);
    const overProcess = await streamUpload(stranger.client, strangerDocsPath, { fileBytes: 3 * MB, scripted: true }).answer;
    expect(overProcess.status).toBe(429);
    expect(textOf(overProcess.html)).toContain('The server is receiving as many uploads as it can right now');

    // The held uploads finish and are stored; their slots are free again.
    for (const upload of [...held, other]) upload.release();
    for (const answer of await Promise.all([...held, other].map((upload) => upload.answer))) {
      expect(answer.status).toBe(200);
      expect(textOf(answer.html)).toContain('it is being read');
    }
    await until(() => uploads.receivingFor(owner.workspaceId) === 0 && uploads.receivingFor(stranger.workspaceId) === 0);
    const after = await streamUpload(owner.client, docsPath, { fileBytes: MB, scripted: true, fileName: 'after.txt' }).answer;
    expect(after.status).toBe(200);
    expect((await documents(docsPath)).map((d) => d.name).sort()).toEqual(['after.txt', 'held-0.txt', 'held-1.txt']);
    expect((await documents(strangerDocsPath)).map((d) => d.name)).toEqual(['other.txt']);
  });

  it('with Expect: 100-continue, refuses a stranger, a member and no one signed in without 100 Continue; the owner gets it and uploads', async () => {
    for (const [who, client, status] of [
      ['stranger', stranger.client, 404],
      ['member', member.client, 403],
      ['no one signed in', new DashboardClient(t.baseUrl), 403],
    ] as const) {
      for (const token of ['form', 'header'] as const) {
        const answer = await expectContinueUpload(client, docsPath, { fileName: 'expect.txt', token });
        expect({ who, token, continued: answer.continued, status: answer.status, sent: answer.sentBytes }).toEqual({ who, token, continued: false, status, sent: 0 });
      }
    }
    for (const token of ['form', 'header'] as const) {
      const upload = await expectContinueUpload(owner.client, docsPath, { fileName: `expect-${token}.txt`, token });
      expect({ token, continued: upload.continued, status: upload.status }).toEqual({ token, continued: true, status: token === 'form' ? 303 : 200 });
    }
    expect((await documents(docsPath)).map((d) => d.name)).toEqual(expect.arrayContaining(['expect-form.txt', 'expect-header.txt']));
    expect((await documents(docsPath)).map((d) => d.name)).not.toContain('expect.txt');
  });

  it('an upload by the form, token first in the body, is stored and the connection stays usable', async () => {
    const upload = await streamUpload(owner.client, docsPath, { fileBytes: 200, fileName: 'form-upload.txt' }).answer;
    expect(upload.status).toBe(303);
    // Read to its end, the request's connection need not close.
    expect(upload.headers.connection).not.toBe('close');
    expect(textOf((await owner.client.get(upload.headers.location!)).html)).toContain('Uploaded form-upload.txt');
  });
});

interface StreamedAnswer {
  status: number;
  headers: http.IncomingHttpHeaders;
  html: string;
  /** Bytes of the body the client had handed to its socket when the answer's headers came. */
  sentAtAnswer: number;
}

interface StreamedUpload {
  answer: Promise<StreamedAnswer>;
  /** Bytes the client had sent when the connection closed. */
  closed: Promise<number>;
  totalBytes: number;
  /** Lets an upload held at `holdAfter` send the rest. */
  release(): void;
}

/**
 * A multipart upload of one file of `fileBytes` (the letter a), written 64 KB at a time with
 * a pause between chunks, waiting for the socket to drain; it stops writing when the answer
 * comes (unless `keepWriting`). `token`: the CSRF token as the form's first field (a form without JavaScript) or
 * the header (assistants.js); `chunked`: no Content-Length.
 */
function streamUpload(
  client: DashboardClient,
  path: string,
  options: {
    fileBytes: number;
    fileName?: string;
    token?: 'form' | 'header';
    scripted?: boolean;
    chunked?: boolean;
    holdAfter?: number;
    pauseMs?: number;
    /** Go on writing after the answer, until the server closes the connection. */
    keepWriting?: boolean;
  },
): StreamedUpload {
  const boundary = '----upload-authorisation-test';
  const token = client.csrfToken ?? '';
  const tokenInForm = (options.token ?? 'form') === 'form';
  const preamble = Buffer.from(
    (tokenInForm ? `--${boundary}\r\nContent-Disposition: form-data; name="_csrf"\r\n\r\n${token}\r\n` : '') +
      `--${boundary}\r\nContent-Disposition: form-data; name="files"; filename="${options.fileName ?? 'big.txt'}"\r\nContent-Type: text/plain\r\n\r\n`,
  );
  const epilogue = Buffer.from(`\r\n--${boundary}--\r\n`);
  const totalBytes = preamble.length + options.fileBytes + epilogue.length;
  const headers: http.OutgoingHttpHeaders = {
    'content-type': `multipart/form-data; boundary=${boundary}`,
    cookie: [...client.cookies].map(([name, value]) => `${name}=${value}`).join('; '),
    accept: 'text/html',
  };
  if (!tokenInForm) headers['x-csrf-token'] = token;
  if (options.scripted) headers['x-requested-with'] = 'XMLHttpRequest';
  if (!options.chunked) headers['content-length'] = totalBytes;
  const url = new URL(`${client.baseUrl}${path}`);
  const req = http.request({ host: url.hostname, port: url.port, path: url.pathname, method: 'POST', headers, agent: false });

  let sent = 0;
  let answered = false;
  let release!: () => void;
  const released = new Promise<void>((resolve) => (release = resolve));
  const closed = new Promise<number>((resolve) => req.once('close', () => resolve(sent)));

  const answer = new Promise<StreamedAnswer>((resolve, reject) => {
    req.once('response', (res) => {
      answered = true;
      const sentAtAnswer = sent;
      let html = '';
      res.setEncoding('utf8');
      res.on('data', (chunk: string) => (html += chunk));
      res.once('end', () => {
        resolve({ status: res.statusCode!, headers: res.headers, html, sentAtAnswer });
        if (!options.keepWriting) req.destroy();
      });
      res.once('error', reject);
    });
    // Writing into a connection the server closed after answering is expected; before any answer it is a failure.
    req.on('error', (error) => {
      if (!answered) reject(new Error(`No answer after ${sent} bytes: ${error.message}`));
    });
  });

  const chunk = Buffer.alloc(64 * 1024, 'a');
  const write = async (data: Buffer): Promise<boolean> => {
    const stop = (): boolean => (answered && !options.keepWriting) || req.destroyed;
    if (stop()) return false;
    sent += data.length;
    if (!req.write(data)) await Promise.race([new Promise((resolve) => req.once('drain', resolve)), closed]);
    return !stop();
  };
  void (async () => {
    if (!(await write(preamble))) return;
    for (let done = 0; done < options.fileBytes; ) {
      if (options.holdAfter !== undefined && done >= options.holdAfter) {
        await Promise.race([released, closed]);
        options.holdAfter = undefined;
      }
      const size = Math.min(chunk.length, options.fileBytes - done);
      if (!(await write(size === chunk.length ? chunk : chunk.subarray(0, size)))) return;
      done += size;
      if ((options.pauseMs ?? 2) > 0) await sleep(options.pauseMs ?? 2);
    }
    if (await write(epilogue)) req.end();
  })();
  return { answer, closed, totalBytes, release: () => release() };
}

/**
 * A small multipart upload sent as curl sends one: headers with `Expect: 100-continue`, and
 * the body only once the server answers `100 Continue`. Says whether it came, and how many
 * bytes of the body went out before the final answer.
 */
function expectContinueUpload(
  client: DashboardClient,
  path: string,
  options: { fileName: string; token: 'form' | 'header' },
): Promise<{ continued: boolean; status: number; sentBytes: number }> {
  const boundary = '----expect-continue-test';
  const token = client.csrfToken ?? '';
  const body = Buffer.from(
    (options.token === 'form' ? `--${boundary}\r\nContent-Disposition: form-data; name="_csrf"\r\n\r\n${token}\r\n` : '') +
      `--${boundary}\r\nContent-Disposition: form-data; name="files"; filename="${options.fileName}"\r\nContent-Type: text/plain\r\n\r\n` +
      `The handbook says hello.\r\n--${boundary}--\r\n`,
  );
  const headers: http.OutgoingHttpHeaders = {
    'content-type': `multipart/form-data; boundary=${boundary}`,
    'content-length': body.length,
    expect: '100-continue',
    cookie: [...client.cookies].map(([name, value]) => `${name}=${value}`).join('; '),
    accept: 'text/html',
  };
  if (options.token === 'header') {
    headers['x-csrf-token'] = token;
    headers['x-requested-with'] = 'XMLHttpRequest';
  }
  const url = new URL(`${client.baseUrl}${path}`);
  return new Promise((resolve, reject) => {
    let continued = false;
    let sentBytes = 0;
    const req = http.request({ host: url.hostname, port: url.port, path: url.pathname, method: 'POST', headers, agent: false });
    req.once('continue', () => {
      continued = true;
      sentBytes = body.length;
      req.end(body);
    });
    req.once('response', (res) => {
      res.resume();
      res.once('end', () => {
        resolve({ continued, status: res.statusCode!, sentBytes });
        req.destroy();
      });
    });
    req.once('error', reject);
    req.flushHeaders();
  });
}

async function until(condition: () => boolean): Promise<void> {
  for (let i = 0; i < 1000 && !condition(); i++) await sleep(10);
  expect(condition()).toBe(true);
}
