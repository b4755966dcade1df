import { Module, type INestApplicationContext } from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import { TypeOrmModule } from '@nestjs/typeorm';
import { mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import * as path from 'node:path';
import { DataSource } from 'typeorm';
import { DocumentEmbeddings } from '../src/assistants/documents/document-embeddings';
import { DocumentsModule } from '../src/assistants/documents/documents.module';
import { DocumentsService } from '../src/assistants/documents/documents.service';
import { lexicalSearch } from '../src/assistants/documents/lexical-search';
import { ConfigModule } from '../src/config/config.module';
import { dataSourceOptions } from '../src/database/data-source';
import {
  baselineSearch,
  contentWords,
  englishStems,
  isHit,
  loadCorpus,
  loadQuestions,
  measureRecall,
  QUESTION_KINDS,
  recallTable,
  type RecallReport,
  type RetrievalQuestion,
  shareStem,
} from './retrieval/recall';
import { type EmbeddingFunction, type FakeOpenAi, startFakeOpenAi } from './fakes/fake-openai';
import { testConfig } from './support/test-app';
import { createTestDatabase } from './support/test-database';

/**
 * Recall@5 on the retrieval set (test/retrieval): 200+ questions over 50+ documents, each
 * labelled with the passage that answers it, by kind (keyword, paraphrase, typo, identifier,
 * other language). Today's search (the baseline of commit 50bc306) is measured next to the
 * legs that replace it.
 */

const corpus = loadCorpus();
const questions = loadQuestions();

/**
 * The fake upstream's vectors for the hybrid measurement, which ENCODE THE LABELS: question i
 * points at dimension i, a chunk at the dimensions of the questions whose passage it holds
 * (and a little at the last one, so that none is zero). It proves the dense leg's plumbing
 * and the fusion, not a model's quality: a paraphrased question finds its passage only
 * through the dense leg.
 */
function labelVectors(set: RetrievalQuestion[]): EmbeddingFunction {
  const labels = new Map(set.map((question, i) => [question.question, i]));
  return (input, dimensions) => {
    const vector = new Float32Array(dimensions);
    const text = typeof input === 'string' ? input : '';
    const label = labels.get(text);
    if (label !== undefined) {
      vector[label] = 1;
      return vector;
    }
    set.forEach((question, i) => {
      if (isHit({ document_name: question.document, content: text }, question)) vector[i] = 1;
    });
    vector[dimensions - 1] = 0.1;
    return vector;
  };
}

describe('the retrieval set', () => {
  it('has at least 50 documents, 3 of them in another language, and 200 questions of every kind', () => {
    expect(corpus.length).toBeGreaterThanOrEqual(50);
    const names = new Set(corpus.map((file) => file.name));
    expect(names.size).toBe(corpus.length);
    expect(new Set(questions.filter((q) => q.kind === 'language').map((q) => q.document)).size).toBeGreaterThanOrEqual(3);
    expect(questions.length).toBeGreaterThanOrEqual(200);
    expect(new Set(questions.map((q) => q.id)).size).toBe(questions.length);
    for (const kind of QUESTION_KINDS) expect(questions.filter((q) => q.kind === kind).length).toBeGreaterThanOrEqual(20);
  });

  it('labels every question with an exact passage of its document', () => {
    const texts = new Map(corpus.map((file) => [file.name, readFileSync(file.path, 'utf8')]));
    const wrong = questions.filter((q) => !texts.get(q.document)?.includes(q.passage)).map((q) => q.id);
    expect(wrong).toEqual([]);
  });

  it('phrases paraphrased questions without a content word of their passage (nor one of the same stem)', () => {
    const sharing = questions
      .filter((q) => q.kind === 'paraphrase')
      .flatMap((q) => {
        const passageWords = contentWords(q.passage);
        return contentWords(q.question)
          .filter((word) => passageWords.some((other) => shareStem(word, other)))
          .map((word) => `${q.id}: ${word}`);
      });
    expect(sharing).toEqual([]);
  });
});

describe('recall@5 on the retrieval set', () => {
  let app: INestApplicationContext;
  let documents: DocumentsService;
  let dataSource: DataSource;
  let assistantId: string;
  let workspaceId: string;
  /** The embedding upstream of the hybrid measurement (labelVectors). */
  let upstream: FakeOpenAi;
  const reports: Record<string, RecallReport> = {};

  beforeAll(async () => {
    const databaseUrl = await createTestDatabase();
    upstream = await startFakeOpenAi();
    upstream.embedWith(labelVectors(questions));
    process.env.RECALL_TEST_EMBEDDINGS_KEY = 'sk-recall';
    const catalog = path.join(mkdtempSync(path.join(tmpdir(), 'recall-catalog-')), 'models.json');
    writeFileSync(
      catalog,
      JSON.stringify({
        models: [
          {
            id: 'label-embed',
            provider: 'openai',
            kind: 'embedding',
            dimensions: 1536,
            context_length: 8_192,
            input_price: 2_000,
            output_price: 0,
            deployments: [{ label: 'labels', provider: 'openai', base_url: upstream.url, api_key_env: 'RECALL_TEST_EMBEDDINGS_KEY' }],
          },
        ],
      }),
    );
    @Module({
      imports: [
        ConfigModule.forRoot(testConfig({ modelCatalogFile: catalog, llmSimulator: 'off' })),
        TypeOrmModule.forRoot({ ...dataSourceOptions(databaseUrl), logging: ['error'] }),
        DocumentsModule,
      ],
    })
    class TestModule {}
    app = await NestFactory.createApplicationContext(TestModule, { logger: false });
    documents = app.get(DocumentsService);
    dataSource = app.get(DataSource);
    const [workspace] = await dataSource.query<Array<{ id: string }>>(
      `INSERT INTO workspaces (name, tier) VALUES ('Recall', 'enterprise') RETURNING id`,
    );
    const [assistant] = await dataSource.query<Array<{ id: string }>>(
      `INSERT INTO assistants (workspace_id, name, slug, model) VALUES ($1, 'Librarian', 'librarian', 'gpt-4o-mini') RETURNING id`,
      [workspace.id],
    );
    assistantId = assistant.id;
    workspaceId = workspace.id;
    for (const file of corpus) {
      await documents.add({ workspaceId: workspace.id, assistantId, fileName: file.name, data: readFileSync(file.path) });
    }
  }, 300_000);
  afterAll(async () => {
    if (Object.keys(reports).length > 0) console.log(`Recall@5 on ${questions.length} questions:\n${recallTable(reports)}`);
    await app?.close();
    await upstream?.close();
  });

  it('stems no paraphrased question like its passage (PostgreSQL English configuration)', async () => {
    const sharing: string[] = [];
    for (const q of questions.filter((question) => question.kind === 'paraphrase')) {
      const passage = new Set(await englishStems(dataSource.manager, q.passage));
      for (const stem of await englishStems(dataSource.manager, q.question)) if (passage.has(stem)) sharing.push(`${q.id}: ${stem}`);
    }
    expect(sharing).toEqual([]);
  });

  it('measures today\'s search (the baseline)', async () => {
    reports.today = await measureRecall(questions, (question, k) => baselineSearch(dataSource.manager, assistantId, question, k));
    expect(reports.today.overall.questions).toBe(questions.length);
  }, 120_000);

  it('finds with the lexical leg at least what today\'s search finds, and more typos, identifiers and other languages', async () => {
    reports.lexical = await measureRecall(questions, (question, k) =>
      lexicalSearch(dataSource.manager, assistantId, question, { limit: k }),
    );
    const { today, lexical } = reports;
    expect(lexical.overall.hits).toBeGreaterThanOrEqual(today.overall.hits);
    for (const kind of QUESTION_KINDS.filter((k) => k !== 'paraphrase')) {
      expect(lexical.byKind[kind].hits).toBeGreaterThanOrEqual(today.byKind[kind].hits);
    }
    for (const kind of ['typo', 'identifier', 'language'] as const) {
      expect(lexical.byKind[kind].hits).toBeGreaterThan(today.byKind[kind].hits);
    }
  }, 120_000);

  it('hybrid search (lexical and dense legs fused) finds the paraphrased questions that only the dense leg can', async () => {
    // The assistant gets an embedding model: its documents are embedded (and charged) as ingestion does.
    await dataSource.query(`INSERT INTO wallets (workspace_id, balance_millicents) VALUES ($1, 100000000)`, [workspaceId]);
    await dataSource.query(`UPDATE assistants SET embedding_model = 'label-embed' WHERE id = $1`, [assistantId]);
    const embeddings = app.get(DocumentEmbeddings);
    await embeddings.modelChanged(dataSource.manager, [assistantId]);
    for (const { id } of await dataSource.query<Array<{ id: string }>>('SELECT id FROM documents WHERE assistant_id = $1', [assistantId])) {
      await embeddings.embed(id);
    }
    const [pending] = await dataSource.query<Array<{ n: number }>>('SELECT count(*)::int AS n FROM document_chunks WHERE assistant_id = $1 AND embedding IS NULL', [assistantId]);
    expect(pending.n).toBe(0);
    try {
      reports.hybrid = await measureRecall(questions, (question, k) => documents.search(assistantId, question, { maxResults: k }));
    } finally {
      await dataSource.query(`UPDATE assistants SET embedding_model = NULL WHERE id = $1`, [assistantId]);
    }
    const today = reports.today ?? (await measureRecall(questions, (question, k) => baselineSearch(dataSource.manager, assistantId, question, k)));
    const lexical = reports.lexical ?? (await measureRecall(questions, (question, k) => lexicalSearch(dataSource.manager, assistantId, question, { limit: k })));
    const { paraphrase } = reports.hybrid.byKind;
    // The paraphrases share no word with their passage: the lexical legs miss most of them, the fused search finds them.
    expect(paraphrase.recall).toBeGreaterThanOrEqual(0.95);
    expect(today.byKind.paraphrase.recall).toBeLessThanOrEqual(0.5);
    expect(lexical.byKind.paraphrase.recall).toBeLessThanOrEqual(0.5);
    // Fusing keeps what the lexical leg found, kind by kind.
    for (const kind of QUESTION_KINDS) expect(reports.hybrid.byKind[kind].recall).toBeGreaterThanOrEqual(lexical.byKind[kind].recall);
  }, 180_000);
});
