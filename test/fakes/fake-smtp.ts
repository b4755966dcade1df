import { createServer, type Socket } from 'node:net';
import type { AddressInfo } from 'node:net';

/**
 * A stand-in SMTP server on 127.0.0.1: enough of RFC 5321 for nodemailer without TLS or
 * authentication (EHLO, MAIL, RCPT, DATA, RSET, NOOP, QUIT). It keeps every message it
 * accepts, its body decoded from quoted-printable; with `reject` set it answers RCPT with a
 * permanent failure (550), as a mail server that refuses the recipient does.
 *
 *   const smtp = await startFakeSmtp();
 *   ... SMTP_URL=smtp.url ...
 *   const link = smtp.lastTo('ada@example.com')!.text.match(/https?:\S+/)![0];
 */
export interface ReceivedMail {
  from: string;
  to: string[];
  subject: string;
  /** The body, decoded. */
  text: string;
}

export interface FakeSmtp {
  /** `smtp://127.0.0.1:<port>` */
  url: string;
  received: ReceivedMail[];
  /** Refuse every recipient (550) from now on, or accept again. */
  reject: boolean;
  /** The newest message to this address. */
  lastTo(address: string): ReceivedMail | undefined;
  close(): Promise<void>;
}

export async function startFakeSmtp(): Promise<FakeSmtp> {
  const received: ReceivedMail[] = [];
  const sockets = new Set<Socket>();
  const fake: FakeSmtp = {
    url: '',
    received,
    reject: false,
    lastTo: (address) => received.filter((mail) => mail.to.includes(address.toLowerCase())).at(-1),
    close: () =>
      new Promise((resolve) => {
        for (const socket of sockets) socket.destroy();
        server.close(() => resolve());
      }),
  };

  const server = createServer((socket) => {
    sockets.add(socket);
    socket.on('close', () => sockets.delete(socket));
    socket.on('error', () => undefined);
    let buffer = '';
    let inData = false;
    let envelope: { from: string; to: string[] } = { from: '', to: [] };
    const reply = (line: string) => socket.write(`${line}\r\n`);
    reply('220 fake-smtp ready');
    socket.on('data', (chunk: Buffer) => {
      buffer += chunk.toString('latin1');
      for (;;) {
        if (inData) {
          const end = buffer.indexOf('\r\n.\r\n');
          if (end < 0) return;
          received.push({ ...envelope, ...parseMessage(buffer.slice(0, end)) });
          buffer = buffer.slice(end + 5);
          inData = false;
          envelope = { from: '', to: [] };
          reply('250 OK: queued');
          continue;
        }
        const newline = buffer.indexOf('\r\n');
        if (newline < 0) return;
        const line = buffer.slice(0, newline);
        buffer = buffer.slice(newline + 2);
        const verb = line.slice(0, 4).toUpperCase();
        if (verb === 'EHLO' || verb === 'HELO') reply('250 fake-smtp');
        else if (verb === 'MAIL') {
          envelope = { from: addressIn(line), to: [] };
          reply('250 OK');
        } else if (verb === 'RCPT') {
          if (fake.reject) reply('550 5.1.1 Recipient refused');
          else {
            envelope.to.push(addressIn(line).toLowerCase());
            reply('250 OK');
          }
        } else if (verb === 'DATA') {
          inData = true;
          reply('354 End data with <CR><LF>.<CR><LF>');
        } else if (verb === 'RSET') {
          envelope = { from: '', to: [] };
          reply('250 OK');
        } else if (verb === 'NOOP') reply('250 OK');
        else if (verb === 'QUIT') {
          reply('221 Bye');
          socket.end();
        } else reply('502 Command not implemented');
      }
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  fake.url = `smtp://127.0.0.1:${(server.address() as AddressInfo).port}`;
  return fake;
}

function addressIn(line: string): string {
  return /<([^>]*)>/.exec(line)?.[1] ?? '';
}

/** The subject and the decoded text of a single-part message as nodemailer writes a plain-text mail. */
function parseMessage(raw: string): { subject: string; text: string } {
  const split = raw.indexOf('\r\n\r\n');
  const head = raw.slice(0, split).replace(/\r\n[ \t]+/g, ' ');
  const body = raw.slice(split + 4).replace(/^\.\./gm, '.');
  const header = (name: string) => new RegExp(`^${name}:\\s*(.*)$`, 'im').exec(head)?.[1]?.trim() ?? '';
  const encoding = header('Content-Transfer-Encoding').toLowerCase();
  const text =
    encoding === 'quoted-printable'
      ? Buffer.from(
          body.replace(/=\r\n/g, '').replace(/=([0-9A-F]{2})/gi, (_, hex: string) => String.fromCharCode(parseInt(hex, 16))),
          'latin1',
        ).toString('utf8')
      : encoding === 'base64'
        ? Buffer.from(body, 'base64').toString('utf8')
        : Buffer.from(body, 'latin1').toString('utf8');
  return { subject: header('Subject'), text: text.replace(/\r\n/g, '\n') };
}
