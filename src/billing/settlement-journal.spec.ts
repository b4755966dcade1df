import { mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import * as path from 'node:path';
import { JournalEntry, ProcessIdentity, SettlementJournal } from './settlement-journal';

function entry(key: string): JournalEntry {
  return {
    requestId: `req_${key}`,
    key,
    workspaceId: 'ws',
    heldIn: { rowId: 'lease-1', lease: true },
    costMicros: '22500000',
    description: 'gpt-4o: 10 input + 20 output tokens',
    usageRow: { request_id: `req_${key}`, total_cost_millicents: 22.5 },
  };
}

describe('SettlementJournal', () => {
  let dir: string;
  const me = ProcessIdentity.current();
  const files = () => readdirSync(dir).sort();

  beforeEach(() => {
    dir = mkdtempSync(path.join(tmpdir(), 'acs-journal-'));
  });
  afterEach(() => rmSync(dir, { recursive: true, force: true }));

  it('appends each settlement as a line before returning, and reads them back', () => {
    const journal = new SettlementJournal(dir, me);
    const segment = journal.append(entry('a'));
    journal.append(entry('b'));
    expect(files()).toEqual([`${me.name}.0.jsonl`]);
    expect(SettlementJournal.read(segment.file)).toEqual([entry('a'), entry('b')]);
    expect(segment.pending).toBe(2);
  });

  it('deletes a segment once it is closed and everything in it committed, and keeps one with settlements pending', () => {
    const journal = new SettlementJournal(dir, me);
    const first = Array.from({ length: 1_000 }, (_, i) => journal.append(entry(`k${i}`)));
    expect(new Set(first).size).toBe(1);
    const second = journal.append(entry('next'));
    expect(second).not.toBe(first[0]);
    expect(files()).toEqual([`${me.name}.0.jsonl`, `${me.name}.1.jsonl`]);

    first.slice(1).forEach((segment) => journal.committed(segment));
    expect(files()).toHaveLength(2);
    journal.committed(first[0]);
    expect(files()).toEqual([`${me.name}.1.jsonl`]);

    // The current one stays open while in use; closed with a settlement pending, it stays for the next process.
    journal.close();
    expect(files()).toEqual([`${me.name}.1.jsonl`]);
  });

  it('deletes its current segment at close when nothing in it is pending', () => {
    const journal = new SettlementJournal(dir, me);
    journal.committed(journal.append(entry('a')));
    expect(files()).toHaveLength(1);
    journal.close();
    expect(files()).toEqual([]);
  });

  it("claims the segments of processes that are gone (a pid reused counts as gone), never those of running processes or of other hosts", () => {
    const running = ProcessIdentity.parse(parentName())!;
    const reused = new ProcessIdentity(me.host, process.pid, `${Number(me.startTime) + 1}`);
    const gone = new ProcessIdentity(me.host, 4_194_304 + 7, '12345'); // above Linux's pid_max
    const elsewhere = new ProcessIdentity('other-host', 4_194_304 + 8, '12345');
    for (const owner of [running, reused, gone, elsewhere]) writeFileSync(path.join(dir, `${owner.name}.0.jsonl`), `${JSON.stringify(entry(owner.startTime))}\n`);
    writeFileSync(path.join(dir, 'notes.txt'), 'not a journal');

    const claimed = new SettlementJournal(dir, me).claimOrphans();
    expect(claimed.map((file) => SettlementJournal.read(file)[0].key).sort()).toEqual([reused.startTime, gone.startTime].sort());
    // Claimed files carry this process's name: were it to die, the next process claims them in turn.
    for (const file of claimed) expect(path.basename(file).startsWith(`${me.name}.claimed-`)).toBe(true);
    expect(files()).toEqual(
      [`${running.name}.0.jsonl`, `${elsewhere.name}.0.jsonl`, 'notes.txt', ...claimed.map((file) => path.basename(file))].sort(),
    );
    // Nothing is claimed twice.
    expect(new SettlementJournal(dir, me).claimOrphans()).toEqual([]);
  });

  it('skips a line cut short by a machine that stopped mid-write', () => {
    const file = path.join(dir, 'cut.jsonl');
    writeFileSync(file, `${JSON.stringify(entry('a'))}\n${JSON.stringify(entry('b')).slice(0, 40)}`);
    expect(SettlementJournal.read(file)).toEqual([entry('a')]);
  });

  it('names a process by host, pid and start time, and recognises itself as running', () => {
    expect(ProcessIdentity.parse(me.name)).toEqual(me);
    expect(me.isRunning()).toBe(true);
    expect(ProcessIdentity.parse('host~12~x')).toBeNull();
    expect(ProcessIdentity.parse('a~1~2~3')).toBeNull();
    expect(readFileSync(`/proc/${process.pid}/stat`, 'utf8')).toContain(` ${me.startTime} `);
  });
});

/** The parent process (running, by definition) as its own journal would name it. */
function parentName(): string {
  const stat = readFileSync(`/proc/${process.ppid}/stat`, 'utf8');
  return new ProcessIdentity(ProcessIdentity.current().host, process.ppid, stat.slice(stat.lastIndexOf(')') + 2).split(' ')[19]).name;
}
