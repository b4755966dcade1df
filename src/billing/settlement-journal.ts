import { accessSync, closeSync, constants, existsSync, mkdirSync, openSync, readdirSync, readFileSync, renameSync, unlinkSync, writeSync } from 'node:fs';
import { hostname } from 'node:os';
import * as path from 'node:path';

/** A settlement as the journal keeps it: what another process needs to write it again. */
export interface JournalEntry {
  requestId: string;
  /** The settlement's key (the hold's id): its ledger row and usage record are keyed by it. */
  key: string;
  workspaceId: string;
  /** The row its money was set aside in: its own hold, or the lease it was admitted from. */
  heldIn: { rowId: string; lease: boolean };
  /** The exact cost in micro-millicents, as a decimal string. */
  costMicros: string;
  description: string;
  /** Its usage_records row (UsageService.row). */
  usageRow: Record<string, unknown>;
}

/** One file of the journal; deleted once every settlement in it has committed. */
export interface JournalSegment {
  readonly file: string;
  entries: number;
  /** Appended, not yet committed. */
  pending: number;
}

/** A segment is closed, and a new one started, after this many settlements. */
const SEGMENT_ENTRIES = 1_000;
const SUFFIX = '.jsonl';

/**
 * The settlements a process has answered for and not yet committed, in files under
 * DATA_DIR (SETTLEMENT_DURABILITY=journal). An entry is appended with a synchronous write
 * before its request is answered, so it outlives the process: a SIGKILL, a crash or an
 * out-of-memory kill leaves it in the file, and the next process on that DATA_DIR (at its
 * start, and every few seconds while it runs) claims the files of processes that are no
 * longer running and writes their settlements again; the database makes that idempotent
 * (each settlement's ledger row and usage record are keyed by it). Only the machine's own
 * crash (the operating system losing the file's unflushed pages) loses the settlements of
 * the last few milliseconds before it.
 *
 * Files are named after their process (`<host>~<pid>~<start time>.<n>.jsonl`), so a file
 * whose process is gone is recognised, also after its pid was reused; a file of another
 * host (a shared volume) is left to that host.
 */
export class SettlementJournal {
  private current: (JournalSegment & { fd: number }) | null = null;
  private nextSegment = 0;

  constructor(
    private readonly dir: string,
    private readonly owner: ProcessIdentity = ProcessIdentity.current(),
  ) {}

  /** Appends the entry and returns once the operating system has it (not the disk). */
  append(entry: JournalEntry): JournalSegment {
    const segment = this.current && this.current.entries < SEGMENT_ENTRIES ? this.current : this.startSegment();
    const line = Buffer.from(`${JSON.stringify(entry)}\n`);
    let written = 0;
    try {
      written = writeSync(segment.fd, line);
    } finally {
      // A failed or short write (a full disk) leaves a cut line: the next entry starts a new file.
      if (written !== line.length) this.close();
    }
    if (written !== line.length) throw new Error(`Only ${written} of ${line.length} bytes reached ${segment.file}`);
    segment.entries += 1;
    segment.pending += 1;
    return segment;
  }

  /**
   * A settlement of the segment committed: a closed segment with nothing pending is deleted.
   * Never throws: a segment that cannot be deleted stays, and the next process finds its
   * settlements written (and skips them).
   */
  committed(segment: JournalSegment): void {
    segment.pending -= 1;
    if (segment.pending === 0 && segment !== this.current) removeQuietly(segment.file);
  }

  /** Closes the current segment; deleted when nothing in it is pending, kept for the next process otherwise. */
  close(): void {
    const segment = this.current;
    if (!segment) return;
    this.current = null;
    closeSync(segment.fd);
    if (segment.pending === 0) removeQuietly(segment.file);
  }

  /**
   * The segments of processes that are no longer running, claimed by this one: each is
   * renamed into this process's name first (a rename is atomic, so two processes never
   * claim the same file), and is then this process's to write and delete.
   */
  claimOrphans(): string[] {
    if (!existsSync(this.dir)) return [];
    const claimed: string[] = [];
    for (const name of readdirSync(this.dir)) {
      if (!name.endsWith(SUFFIX)) continue;
      const owner = ProcessIdentity.parse(name.slice(0, name.indexOf('.')));
      if (!owner || owner.host !== this.owner.host || owner.isSameAs(this.owner) || owner.isRunning()) continue;
      const file = path.join(this.dir, `${this.owner.name}.claimed-${this.nextSegment++}${SUFFIX}`);
      try {
        renameSync(path.join(this.dir, name), file);
      } catch {
        continue; // Claimed by another process meanwhile.
      }
      claimed.push(file);
    }
    return claimed;
  }

  /** The entries of a segment; a line cut short (the machine stopped mid-write) is skipped. */
  static read(file: string): JournalEntry[] {
    return readFileSync(file, 'utf8')
      .split('\n')
      .flatMap((line) => {
        if (!line) return [];
        try {
          return [JSON.parse(line) as JournalEntry];
        } catch {
          return [];
        }
      });
  }

  /** Throws unless the journal's directory can be created and written to (at start, to fail early). */
  static check(dir: string): void {
    mkdirSync(dir, { recursive: true, mode: 0o700 });
    accessSync(dir, constants.W_OK);
  }

  static remove(file: string): void {
    removeFile(file);
  }

  private startSegment(): JournalSegment & { fd: number } {
    this.close();
    mkdirSync(this.dir, { recursive: true, mode: 0o700 });
    const file = path.join(this.dir, `${this.owner.name}.${this.nextSegment++}${SUFFIX}`);
    // 'wx': never another process's file of the same name (a pid reused where there is no /proc).
    this.current = { file, fd: openSync(file, 'wx', 0o600), entries: 0, pending: 0 };
    return this.current;
  }
}

/**
 * A process, as its journal files name it: host, pid and start time (in clock ticks since
 * the machine booted, from /proc; where there is no /proc, only the pid is checked).
 */
export class ProcessIdentity {
  constructor(
    readonly host: string,
    readonly pid: number,
    readonly startTime: string,
  ) {}

  static current(): ProcessIdentity {
    return new ProcessIdentity(safeHost(hostname()), process.pid, statOf(process.pid)?.startTime ?? '0');
  }

  static parse(name: string): ProcessIdentity | null {
    const [host, pid, startTime, ...rest] = name.split('~');
    if (rest.length > 0 || !host || !/^\d+$/.test(pid ?? '') || !/^\d+$/.test(startTime ?? '')) return null;
    return new ProcessIdentity(host, Number(pid), startTime);
  }

  get name(): string {
    return `${this.host}~${this.pid}~${this.startTime}`;
  }

  isSameAs(other: ProcessIdentity): boolean {
    return this.name === other.name;
  }

  /** Whether this process still runs on this machine (a reused pid has another start time; a zombie has ended). */
  isRunning(): boolean {
    const stat = statOf(this.pid);
    if (stat !== undefined) return stat.startTime === this.startTime && stat.state !== 'Z';
    if (existsSync('/proc/self/stat')) return false; // Linux, and no such process.
    try {
      process.kill(this.pid, 0);
      return true;
    } catch (error) {
      return (error as NodeJS.ErrnoException).code === 'EPERM';
    }
  }
}

/** Fields 3 (state) and 22 (start time) of /proc/<pid>/stat, after the command name (which may hold spaces and parentheses). */
function statOf(pid: number): { state: string; startTime: string } | undefined {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
    return { state: fields[0], startTime: fields[19] };
  } catch {
    return undefined;
  }
}

/** The host name as a file name part: no separators of ours, nothing a path would read. */
function safeHost(host: string): string {
  return host.replace(/[^A-Za-z0-9-]/g, '-') || 'host';
}

function removeQuietly(file: string): void {
  try {
    removeFile(file);
  } catch {
    // Left for the next process, which finds its settlements written.
  }
}

function removeFile(file: string): void {
  try {
    unlinkSync(file);
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code !== 'ENOENT') throw error;
  }
}
