// Values valid against a JSON Schema, for the simulator's structured output and tool
// arguments: nothing here knows about chat requests.

export interface ValueOptions {
  /** The text of a string value, given its property name. */
  text: (key: string | undefined) => string;
}

/** Nesting beyond which optional properties are left out, and beyond which nothing more is generated. */
const OPTIONAL_DEPTH = 4;
const MAX_DEPTH = 24;
/**
 * Values and characters generated per schema at most: a hostile schema (`minItems` or
 * `minLength` of millions, nested) cannot blow up. An answer that long is cut at the
 * output cap anyway.
 */
const MAX_VALUES = 5_000;
const MAX_CHARS = 200_000;

/**
 * A value valid against a JSON Schema, as structured output and tool arguments need it:
 * types (the first that is not null), required and listed properties (never extra ones),
 * enums and consts, nested objects and arrays (with their item bounds), `anyOf`/`oneOf`
 * (the first non-null option), `allOf`, local `$ref`s, string lengths and formats, number
 * bounds. Deterministic; bounded in depth and size whatever the schema.
 */
export function valueForSchema(schema: unknown, options: ValueOptions): unknown {
  const state = { root: schema, left: MAX_VALUES, charsLeft: MAX_CHARS, options };
  return generate(schema, state, 0, undefined, 0);
}

type Schema = Record<string, unknown>;
interface GenerationState {
  root: unknown;
  left: number;
  charsLeft: number;
  options: ValueOptions;
}

function generate(input: unknown, state: GenerationState, depth: number, key: string | undefined, ordinal: number): unknown {
  state.left -= 1;
  if (depth > MAX_DEPTH || state.left < 0 || input === false) return null;
  if (typeof input !== 'object' || input === null || Array.isArray(input)) return stringFor({}, state, state.options.text(key), ordinal);
  const schema = input as Schema;
  if (typeof schema.$ref === 'string') return generate(resolveRef(state.root, schema.$ref), state, depth + 1, key, ordinal);
  if ('const' in schema) return schema.const;
  if (Array.isArray(schema.enum) && schema.enum.length > 0) return schema.enum[ordinal % schema.enum.length];
  for (const keyword of ['anyOf', 'oneOf'] as const) {
    const options = schema[keyword];
    if (Array.isArray(options) && options.length > 0) {
      const chosen = options.find((option) => !isNullSchema(option)) ?? options[0];
      return generate(chosen, state, depth + 1, key, ordinal);
    }
  }
  if (Array.isArray(schema.allOf) && schema.allOf.length > 0) {
    const parts = schema.allOf.map((part) => generate(part, state, depth + 1, key, ordinal));
    return parts.every(isPlainObject) ? Object.assign({}, ...parts) : parts[0];
  }
  switch (typeOf(schema)) {
    case 'null':
      return null;
    case 'boolean':
      return true;
    case 'integer':
      return numberFor(schema, true, ordinal);
    case 'number':
      return numberFor(schema, false, ordinal);
    case 'array':
      return arrayFor(schema, state, depth, key);
    case 'object':
      return objectFor(schema, state, depth);
    default:
      return stringFor(schema, state, state.options.text(key), ordinal);
  }
}

function typeOf(schema: Schema): string | undefined {
  const type = Array.isArray(schema.type) ? (schema.type.find((entry) => entry !== 'null') ?? schema.type[0]) : schema.type;
  if (typeof type === 'string') return type;
  if (isPlainObject(schema.properties) || Array.isArray(schema.required)) return 'object';
  if (schema.items !== undefined || schema.prefixItems !== undefined) return 'array';
  return undefined;
}

function isNullSchema(schema: unknown): boolean {
  const type = (schema as Schema | null)?.type;
  return type === 'null' || (Array.isArray(type) && type.length === 1 && type[0] === 'null');
}

export function isPlainObject(value: unknown): value is Record<string, unknown> {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}

/** A local reference (`#/definitions/X`, `#/$defs/X`, `#`); anything else reads as an empty schema. */
function resolveRef(root: unknown, ref: string): unknown {
  if (!ref.startsWith('#')) return {};
  let at: unknown = root;
  for (const raw of ref.slice(1).split('/').slice(1)) {
    const part = decodeURIComponent(raw).replace(/~1/g, '/').replace(/~0/g, '~');
    if (!isPlainObject(at) && !Array.isArray(at)) return {};
    if (!Object.prototype.hasOwnProperty.call(at, part)) return {};
    at = (at as Record<string, unknown>)[part];
  }
  return at;
}

function objectFor(schema: Schema, state: GenerationState, depth: number): Record<string, unknown> {
  const properties = isPlainObject(schema.properties) ? schema.properties : {};
  const required = new Set((Array.isArray(schema.required) ? schema.required : []).filter((name): name is string => typeof name === 'string'));
  const names = depth < OPTIONAL_DEPTH ? [...new Set([...Object.keys(properties), ...required])] : [...required];
  // fromEntries, not assignment: a property named "__proto__" must stay a property.
  return Object.fromEntries(names.map((name) => [name, generate(properties[name] ?? {}, state, depth + 1, name, 0)]));
}

function arrayFor(schema: Schema, state: GenerationState, depth: number, key: string | undefined): unknown[] {
  const min = typeof schema.minItems === 'number' && schema.minItems > 0 ? Math.ceil(schema.minItems) : 1;
  const max = typeof schema.maxItems === 'number' && schema.maxItems >= 0 ? Math.floor(schema.maxItems) : Number.POSITIVE_INFINITY;
  // Tuples: `prefixItems` (2020-12) or an array of `items` (draft-07, as zod-to-json-schema writes them).
  const prefix = Array.isArray(schema.prefixItems) ? schema.prefixItems : Array.isArray(schema.items) ? schema.items : [];
  const rest = Array.isArray(schema.items) ? (schema.additionalItems ?? {}) : (schema.items ?? {});
  const count = Math.max(Math.min(Math.max(min, prefix.length), max), 0);
  const items: unknown[] = [];
  // Items differ by their ordinal, so that `uniqueItems` holds.
  for (let index = 0; index < count && state.left > 0; index++) {
    items.push(generate(index < prefix.length ? prefix[index] : rest, state, depth + 1, key, index));
  }
  return items;
}

function numberFor(schema: Schema, integer: boolean, ordinal: number): number {
  const bound = (value: unknown) => (typeof value === 'number' && Number.isFinite(value) ? value : undefined);
  const [minimum, maximum] = [bound(schema.minimum), bound(schema.maximum)];
  const [above, below] = [bound(schema.exclusiveMinimum), bound(schema.exclusiveMaximum)];
  const multiple = bound(schema.multipleOf);
  const step = multiple !== undefined && multiple > 0 ? multiple : integer ? 1 : undefined;
  const fits = (value: number) =>
    (minimum === undefined || value >= minimum) &&
    (maximum === undefined || value <= maximum) &&
    (above === undefined || value > above) &&
    (below === undefined || value < below);
  const lower = minimum ?? above;
  const upper = maximum ?? below;
  // The usual value first, then values at and between the bounds, each put on the step.
  const candidates = [1 + ordinal, minimum, maximum, lower !== undefined && upper !== undefined ? (lower + upper) / 2 : undefined]
    .concat(above !== undefined ? [above + 1] : [], below !== undefined ? [below - 1] : [], [0])
    .filter((value): value is number => value !== undefined);
  for (const candidate of candidates) {
    for (const value of step === undefined ? [candidate] : [Math.ceil(candidate / step) * step, Math.floor(candidate / step) * step]) {
      if (fits(value)) return value;
    }
  }
  return lower ?? upper ?? 1;
}

const FORMATS: Record<string, string> = {
  'date-time': '2025-01-01T00:00:00Z',
  date: '2025-01-01',
  time: '00:00:00Z',
  duration: 'P1D',
  email: 'simulator@example.com',
  hostname: 'example.com',
  ipv4: '192.0.2.1',
  ipv6: '2001:db8::1',
  uri: 'https://example.com/simulator',
  url: 'https://example.com/simulator',
  uuid: '00000000-0000-4000-8000-000000000000',
};

function stringFor(schema: Schema, state: GenerationState, text: string, ordinal: number): string {
  const formatted = typeof schema.format === 'string' ? FORMATS[schema.format] : undefined;
  let value = formatted ?? (ordinal > 0 ? `${text} ${ordinal + 1}` : text);
  const [min, max] = [schema.minLength, schema.maxLength].map((bound) => (typeof bound === 'number' && bound >= 0 ? Math.floor(bound) : undefined));
  if (max !== undefined && [...value].length > max) value = [...value].slice(0, max).join('');
  if (min !== undefined && [...value].length < min) value = value.padEnd(value.length + Math.min(min - [...value].length, state.charsLeft), '.');
  value = value.slice(0, Math.max(state.charsLeft, 0));
  state.charsLeft -= value.length;
  return value;
}
