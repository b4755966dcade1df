import { Column, Entity, PrimaryGeneratedColumn } from 'typeorm';

/**
 * A passage of a document, a few hundred tokens long and overlapping its neighbours. The
 * table also has `content_tsv`, a generated `to_tsvector('english', content)` with a GIN
 * index; it is only read by SQL, so it is not mapped here.
 */
@Entity({ name: 'document_chunks' })
export class DocumentChunk {
  @PrimaryGeneratedColumn('identity', { type: 'bigint', generatedIdentity: 'ALWAYS' })
  id: string;

  @Column({ name: 'document_id', type: 'uuid' })
  documentId: string;

  /** Its document's assistant (a composite foreign key keeps them equal), for the search filter. */
  @Column({ name: 'assistant_id', type: 'uuid' })
  assistantId: string;

  /** Order in the document, from 0. */
  @Column({ type: 'integer' })
  position: number;

  @Column({ type: 'text' })
  content: string;

  /** Tokens of `content` with the o200k tokenizer. */
  @Column({ type: 'integer' })
  tokens: number;
}
