import type { IncomingMessage, Server, ServerResponse } from 'node:http';

/** Responses whose client waits for `100 Continue` before it sends a body, until something reads the body. */
const awaitingContinue = new WeakSet<ServerResponse>();

/**
 * `Expect: 100-continue`: without a `checkContinue` listener, Node answers `100 Continue`
 * before any handler runs, and a client such as curl then sends its whole body, a document
 * upload to a stranger's workspace included, before the refusal. A multipart body (only a
 * document upload reads one) now gets `100 Continue` only when the upload starts reading it,
 * after the session, the membership and the role were checked: a refusal goes out before
 * any of the body. Every other request gets it at once, as before: its body is JSON or a
 * form, bounded (BODY_LIMIT, 100 kB), read and dropped before authentication, never stored.
 */
export function answerContinueOnlyWhenRead(server: Server): void {
  server.on('checkContinue', (req: IncomingMessage, res: ServerResponse) => {
    if (/^multipart\/form-data/i.test(req.headers['content-type'] ?? '')) awaitingContinue.add(res);
    else res.writeContinue();
    server.emit('request', req, res);
  });
}

/** Called before reading a body: answers `100 Continue` if its client waits for it. */
export function continueBody(res: ServerResponse): void {
  if (awaitingContinue.delete(res)) res.writeContinue();
}
