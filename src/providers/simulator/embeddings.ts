import { createHash } from 'node:crypto';
import type { ModelDefinition } from '../../models/model-catalog';
import { countTextTokens } from '../tokens';

/**
 * The simulator's embedding of one input: a unit vector drawn from the SHA-256 of the model and
 * the input, so the same input always gets the same vector and different inputs near-orthogonal
 * ones. Its first `dimensions` values, normalised again, are the shorter vector a request's
 * `dimensions` asks for (as text-embedding-3 shortens). Not a real model: similar words get no
 * similar vectors.
 */
export function simulatedEmbedding(model: ModelDefinition, input: string | number[], dimensions: number): Float32Array {
  let seed = createHash('sha256').update(`${model.id}\n${typeof input === 'string' ? input : `tokens:${input.join(',')}`}`).digest().readUInt32LE(0);
  // mulberry32: a small deterministic generator, enough for spreading values.
  const next = () => {
    seed = (seed + 0x6d2b79f5) >>> 0;
    let t = seed;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4_294_967_296;
  };
  const values = Array.from({ length: dimensions }, () => next() * 2 - 1);
  const norm = Math.sqrt(values.reduce((sum, value) => sum + value * value, 0)) || 1;
  return Float32Array.from(values, (value) => value / norm);
}

/** The tokens of the inputs as the simulator bills them: our tokenizer's count of a text, the length of a token array. */
export function simulatedPromptTokens(input: string[] | number[][]): number {
  return input.reduce((sum: number, item: string | number[]) => sum + (typeof item === 'string' ? countTextTokens(item) : item.length), 0);
}
