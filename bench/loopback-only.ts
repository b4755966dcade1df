/**
 * Preloaded (`node -r dist/bench/loopback-only.js ...`) into Portkey's gateway by the chat
 * benchmark: the gateway's start script listens on a port without a host, that is on every
 * interface, and has no option for it. Benchmarks serve on 127.0.0.1 only, so a listen on
 * a bare port is given the loopback host here. And when it runs with `--cpu-prof`
 * (BENCH_CPU_PROF), SIGTERM ends it with `process.exit()`, so that the profile is written:
 * the default action of the signal would end it without. Nothing else is changed.
 */
import * as net from 'node:net';

const listen = net.Server.prototype.listen;
net.Server.prototype.listen = function (this: net.Server, ...args: unknown[]) {
  if (typeof args[0] === 'number') {
    if (args[1] === undefined) args.splice(1, 1, '127.0.0.1');
    else if (typeof args[1] === 'function') args.splice(1, 0, '127.0.0.1');
  }
  return (listen as (...a: unknown[]) => net.Server).apply(this, args);
} as typeof net.Server.prototype.listen;

if (process.execArgv.includes('--cpu-prof')) process.once('SIGTERM', () => process.exit(0));
