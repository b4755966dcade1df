import { Logger } from '@nestjs/common';
import { DocumentIngestion } from './document-ingestion';
import type { DocumentEmbeddings } from './document-embeddings';
import type { DocumentsService } from './documents.service';

/** A DocumentsService whose readings end when the test says so. */
function fakeDocuments() {
  const pending = new Map<string, () => void>();
  let running = 0;
  let mostAtOnce = 0;
  const documents = {
    leaseSeconds: 120,
    readers: 2,
    renewLease: jest.fn(async () => undefined),
    ingest: jest.fn(
      (id: string) =>
        new Promise<'ready'>((resolve) => {
          running++;
          mostAtOnce = Math.max(mostAtOnce, running);
          pending.set(id, () => {
            running--;
            pending.delete(id);
            resolve('ready');
          });
        }),
    ),
    claimAbandoned: jest.fn(async (): Promise<string | null> => null),
  };
  return { documents, pending, mostAtOnce: () => mostAtOnce };
}

/** No document is due for embeddings. */
const noEmbeddings = { claimDue: async () => null, embed: async () => undefined, renewLease: async () => undefined } as unknown as DocumentEmbeddings;

const turn = () => new Promise((resolve) => setImmediate(resolve));

describe('DocumentIngestion', () => {
  beforeAll(() => Logger.overrideLogger(false));

  it('reads at most two documents at once; the others wait their turn and all are read', async () => {
    const fake = fakeDocuments();
    const ingestion = new DocumentIngestion(fake.documents as unknown as DocumentsService, noEmbeddings);
    for (const id of ['a', 'b', 'c', 'd', 'e']) ingestion.start(id);
    ingestion.start('a'); // already being read: not twice
    await turn();
    expect([...fake.pending.keys()]).toEqual(['a', 'b']);
    fake.pending.get('a')!();
    await turn();
    expect([...fake.pending.keys()]).toEqual(['b', 'c']);
    while (fake.pending.size > 0) {
      fake.pending.values().next().value!();
      await turn();
    }
    await ingestion.idle();
    expect(fake.documents.ingest.mock.calls.map(([id]) => id)).toEqual(['a', 'b', 'c', 'd', 'e']);
    expect(fake.mostAtOnce()).toBe(2);
    // Each reader renewed its lease when its turn came.
    expect(fake.documents.renewLease).toHaveBeenCalledTimes(5);
  });

  it('a sweep reads every abandoned document it can claim, and a failing sweep is not thrown', async () => {
    const fake = fakeDocuments();
    const abandoned = ['x', 'y'];
    fake.documents.claimAbandoned.mockImplementation(async () => abandoned.shift() ?? null);
    fake.documents.ingest.mockImplementation(async () => 'ready');
    const ingestion = new DocumentIngestion(fake.documents as unknown as DocumentsService, noEmbeddings);
    await expect(ingestion.sweep()).resolves.toBe(2);
    expect(fake.documents.ingest.mock.calls.map(([id]) => id)).toEqual(['x', 'y']);

    fake.documents.claimAbandoned.mockRejectedValue(new Error('database gone'));
    await expect(ingestion.sweep()).resolves.toBe(0);
  });

  it('embeds a document once it is read, outside its reading slot: a slow embeddings upstream holds up no other reading', async () => {
    const fake = fakeDocuments();
    const embedding = new Map<string, () => void>();
    const embeddings = {
      ...noEmbeddings,
      renewLease: async () => undefined,
      embed: jest.fn((id: string) => new Promise<void>((resolve) => embedding.set(id, resolve))),
    } as unknown as DocumentEmbeddings;
    const ingestion = new DocumentIngestion(fake.documents as unknown as DocumentsService, embeddings);
    for (const id of ['a', 'b', 'c']) ingestion.start(id);
    await turn();
    fake.pending.get('a')!();
    fake.pending.get('b')!();
    await turn();
    await turn();
    // a and b wait for their embeddings; c has a reading slot all the same.
    expect([...embedding.keys()]).toEqual(['a', 'b']);
    expect([...fake.pending.keys()]).toEqual(['c']);
    fake.pending.get('c')!();
    await turn();
    for (const done of embedding.values()) done();
    await turn();
    embedding.get('c')?.();
    await ingestion.idle();
    expect((embeddings.embed as jest.Mock).mock.calls.map(([id]) => id)).toEqual(['a', 'b', 'c']);
  });
});
