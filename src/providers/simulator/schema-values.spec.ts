import { toJsonSchema } from '@langchain/core/utils/json_schema';
import { zodSchema } from 'ai';
import { zodResponseFormat } from 'openai/helpers/zod';
import { z } from 'zod';
import { Cancellation } from '../../common/cancellation';
import type { ModelDefinition } from '../../models/model-catalog';
import { valueForSchema } from './schema-values';
import { SimulatorAdapter } from './simulator.adapter';

const text = (key: string | undefined) => `simulated ${key ?? 'text'}`;

/** Shapes clients send: nested objects, enums, arrays of objects, nullables, formats, bounds, unions, tuples, records. */
const Order = z.object({
  id: z.string().uuid(),
  customer: z.object({ name: z.string().min(2).max(8), email: z.string().email(), vip: z.boolean() }),
  status: z.enum(['open', 'shipped', 'closed']),
  kind: z.literal('order'),
  placed_at: z.string().datetime(),
  items: z
    .array(z.object({ sku: z.string(), quantity: z.number().int().min(1).max(99), price: z.number().positive().multipleOf(0.5) }))
    .min(2),
  note: z.string().nullable(),
  discount: z.number().min(10).max(20).nullable(),
  tags: z.array(z.string()).min(3).max(3),
  coordinates: z.tuple([z.number().max(-5), z.number().gt(100)]),
  shipping: z.discriminatedUnion('method', [
    z.object({ method: z.literal('post'), days: z.number().int().lt(0) }),
    z.object({ method: z.literal('pickup'), store: z.string() }),
  ]),
  attributes: z.record(z.string(), z.number()),
  score: z.union([z.number().int().gte(1000), z.string()]),
});

describe('valueForSchema', () => {
  it.each([
    ["openai's zodResponseFormat (what .parse() sends)", () => zodResponseFormat(Order, 'order').json_schema.schema],
    ["LangChain's toJsonSchema (withStructuredOutput)", () => toJsonSchema(Order)],
    // Called untyped: the AI SDK's inference over this schema is deeper than TypeScript allows.
    ["the AI SDK's zodSchema (generateObject)", () => (zodSchema as (schema: unknown) => { jsonSchema: unknown })(Order).jsonSchema],
  ])('generates a value valid against the schema from %s', (_source, schemaOf) => {
    const schema = schemaOf();
    const value = valueForSchema(schema, { text });
    const parsed = Order.safeParse(value);
    expect(parsed.error?.issues ?? []).toEqual([]);
  });

  it('answers the draft-07 shape with additionalProperties false with exactly the listed properties', () => {
    const schema = {
      type: 'object',
      properties: { city: { type: 'string', description: 'The city' }, temperature_c: { type: 'number' }, rain: { type: ['boolean', 'null'] } },
      required: ['city', 'temperature_c'],
      additionalProperties: false,
      $schema: 'http://json-schema.org/draft-07/schema#',
    };
    expect(valueForSchema(schema, { text })).toEqual({ city: 'simulated city', temperature_c: 1, rain: true });
  });

  it('follows local $refs and stops on recursive schemas', () => {
    const tree = {
      $ref: '#/definitions/node',
      definitions: {
        node: {
          type: 'object',
          properties: { label: { type: 'string' }, children: { type: 'array', items: { $ref: '#/definitions/node' }, minItems: 1 } },
          required: ['label', 'children'],
          additionalProperties: false,
        },
      },
    };
    const value = valueForSchema(tree, { text }) as { label: string; children: unknown[] };
    expect(value.label).toBe('simulated label');
    expect(Array.isArray(value.children)).toBe(true);
    expect(JSON.stringify(value).length).toBeLessThan(100_000);
  });

  it('stays small and safe on hostile schemas', () => {
    const huge = { type: 'array', minItems: 1e9, items: { type: 'array', minItems: 1e9, items: { type: 'string', minLength: 1e9 } } };
    expect((valueForSchema(huge, { text }) as unknown[]).flat().length).toBeLessThanOrEqual(5_000);
    expect(JSON.stringify(valueForSchema(huge, { text })).length).toBeLessThan(300_000);
    // Parsed, as a request body is: a literal `__proto__` key would set the prototype instead.
    const proto = valueForSchema(JSON.parse('{"type": "object", "properties": {"__proto__": {"type": "string"}}, "required": ["constructor"]}'), { text });
    expect(Object.getPrototypeOf(proto)).toBe(Object.prototype);
    expect(JSON.stringify(proto)).toBe('{"__proto__":"simulated __proto__","constructor":"simulated constructor"}');
    const malformed = [null, true, false, 7, 'x', [], { $ref: '#/nope/__proto__' }, { $ref: 'http://example.com' }, { anyOf: [] }];
    for (const schema of [...malformed, { type: 'number', minimum: 5, maximum: 1 }]) {
      expect(() => JSON.stringify(valueForSchema(schema, { text }))).not.toThrow();
    }
  });
});

describe('a JSON-mode answer', () => {
  it('follows the JSON Schema of an object that the prompt gives', async () => {
    const simulator = new SimulatorAdapter({ wordDelayMs: 0 });
    const described = await simulator.complete({
      model: { id: 'gpt-4o-mini', provider: 'openai' } as ModelDefinition,
      messages: [
        { role: 'system', content: `Answer with JSON following this schema: ${JSON.stringify(zodResponseFormat(Order, 'o').json_schema.schema)}` },
        { role: 'user', content: 'An order, please' },
      ],
      maxTokens: 1_000,
      extra: { response_format: { type: 'json_object' } },
      cancellation: new Cancellation(),
    });
    expect(Order.safeParse(JSON.parse(described.choices[0].message.content!)).success).toBe(true);
  });
});
