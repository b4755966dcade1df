import { Module, type INestApplicationContext } from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import { TypeOrmModule } from '@nestjs/typeorm';
import { readFileSync } from 'node:fs';
import { DataSource } from 'typeorm';
import { DocumentsModule } from '../src/assistants/documents/documents.module';
import { DocumentsService } from '../src/assistants/documents/documents.service';
import { ConfigModule } from '../src/config/config.module';
import { dataSourceOptions } from '../src/database/data-source';
import {
  baselineSearch,
  contentWords,
  englishStems,
  loadCorpus,
  loadQuestions,
  measureRecall,
  QUESTION_KINDS,
  recallTable,
  type RecallReport,
  shareStem,
} from './retrieval/recall';
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
  const reports: Record<string, RecallReport> = {};

  beforeAll(async () => {
    const databaseUrl = await createTestDatabase();
    @Module({
      imports: [
        ConfigModule.forRoot(testConfig()),
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
    for (const file of corpus) {
      await documents.add({ workspaceId: workspace.id, assistantId, fileName: file.name, data: readFileSync(file.path) });
    }
  }, 300_000);
  afterAll(async () => {
    if (Object.keys(reports).length > 0) console.log(`Recall@5 on ${questions.length} questions:\n${recallTable(reports)}`);
    await app?.close();
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
});
