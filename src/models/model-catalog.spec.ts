import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import * as path from 'node:path';
import { ConfigError } from '../config/app-config';
import { DEFAULT_CATALOG, isChatModel, loadCatalogFile } from './model-catalog';

function catalogFile(content: unknown): string {
  const file = path.join(mkdtempSync(path.join(tmpdir(), 'catalog-')), 'models.json');
  writeFileSync(file, typeof content === 'string' ? content : JSON.stringify(content));
  return file;
}

describe('model catalog', () => {
  it('holds the spec eight chat models and three embedding models, with unique ids and prices', () => {
    const chat = DEFAULT_CATALOG.filter(isChatModel);
    expect(chat).toHaveLength(8);
    expect(new Set(DEFAULT_CATALOG.map((m) => m.id)).size).toBe(11);
    const embedding = DEFAULT_CATALOG.filter((m) => !isChatModel(m));
    expect(embedding.map((m) => [m.id, m.embedding?.dimensions, m.inputPrice, m.outputPrice])).toEqual([
      ['text-embedding-3-small', 1536, 2_000, 0],
      ['text-embedding-3-large', 3072, 13_000, 0],
      ['gemini-embedding-001', 3072, 15_000, 0],
    ]);
    for (const m of chat) {
      expect(m.outputPrice).toBeGreaterThan(m.inputPrice);
      expect(m.cachedInputPrice).toBeLessThanOrEqual(m.inputPrice);
      expect(m.maxOutputTokens).toBeLessThan(m.contextLength);
    }
  });

  it('reads the file format of the architecture document', () => {
    const models = loadCatalogFile(
      catalogFile({
        models: [
          {
            id: 'gpt-4o',
            provider: 'openai',
            upstream_model: 'gpt-4o-2024-08-06',
            owned_by: 'openai',
            context_length: 128000,
            max_output_tokens: 16384,
            vision: true,
            function_calling: true,
            input_price: 250000,
            output_price: 1000000,
            cached_input_price: 125000,
          },
          { id: 'local/llama', provider: 'openai', context_length: 8192, input_price: 0, output_price: 0, vision: false },
        ],
      }),
    );
    expect(models[0]).toMatchObject({ upstreamModel: 'gpt-4o-2024-08-06', cachedInputPrice: 125000 });
    expect(models[1]).toMatchObject({ id: 'local/llama', upstreamModel: 'local/llama', ownedBy: 'openai', vision: false });
  });

  it('lists every problem of a bad file', () => {
    const file = catalogFile({
      models: [
        { id: 'a', provider: 'nobody', context_length: -1, input_price: 1, output_price: 'x' },
        { id: 'a', provider: 'openai', context_length: 1, input_price: 1, output_price: 1 },
      ],
    });
    expect(() => loadCatalogFile(file)).toThrow(/provider[\s\S]*context_length[\s\S]*output_price[\s\S]*appears twice/);
  });

  it('reads aliases, and refuses one that is another name of the catalog, naming both', () => {
    const base = { provider: 'openai', context_length: 8192, input_price: 1, output_price: 2 };
    const [mini] = loadCatalogFile(catalogFile({ models: [{ ...base, id: 'gpt-4o-mini', aliases: ['claude-sonnet-4-5', 'claude-haiku-4-5-20251001'] }] }));
    expect(mini.aliases).toEqual(['claude-sonnet-4-5', 'claude-haiku-4-5-20251001']);

    const file = catalogFile({
      models: [
        { ...base, id: 'gpt-4o', aliases: ['claude-sonnet-4-5', 'gpt-4o', 'assistant/bot', ''] },
        { ...base, id: 'gpt-4o-mini', aliases: ['claude-sonnet-4-5', 'gpt-4o', 'cheap', 'cheap'] },
        { ...base, id: 'o4-mini', aliases: 'reasoner' },
      ],
    });
    let message = '';
    try {
      loadCatalogFile(file);
    } catch (error) {
      message = (error as Error).message;
    }
    expect(message).toContain('models[0] ("gpt-4o").aliases: "gpt-4o" is the model\'s own id');
    expect(message).toContain('models[0] ("gpt-4o").aliases: "assistant/bot" would name an assistant');
    expect(message).toContain('models[0] ("gpt-4o").aliases must be a list of non-empty names');
    expect(message).toContain('models[1] ("gpt-4o-mini").aliases: "claude-sonnet-4-5" is already an alias of "gpt-4o"');
    expect(message).toContain('models[1] ("gpt-4o-mini").aliases: "gpt-4o" is already the id of a model');
    expect(message).toContain('models[1] ("gpt-4o-mini").aliases: "cheap" appears twice');
    expect(message).toContain('models[2] ("o4-mini").aliases must be a list of non-empty names');
  });

  it('refuses a file that is not JSON or has no models', () => {
    expect(() => loadCatalogFile(catalogFile('{nope'))).toThrow(/could not be read as JSON/);
    expect(() => loadCatalogFile(catalogFile({ models: [] }))).toThrow(/at least one model/);
  });

  describe('deployments', () => {
    const keyFile = () => {
      const file = path.join(mkdtempSync(path.join(tmpdir(), 'key-')), 'key.txt');
      writeFileSync(file, 'sk-from-file\n');
      return file;
    };
    const base = { id: 'gpt-4o-mini', provider: 'openai', context_length: 128000, input_price: 15000, output_price: 60000 };

    it('reads each deployment, its key from a variable or a file, and its own prices', () => {
      const [model] = loadCatalogFile(
        catalogFile({
          models: [
            {
              ...base,
              deployments: [
                { label: 'eu', provider: 'openai', api_key_env: 'KEY_EU', weight: 3, rpm: 500, tpm: 90000, region: 'eu' },
                { label: 'compat', provider: 'openai', base_url: 'http://127.0.0.1:9/v1', api_key_file: keyFile(), upstream_model: 'other', input_price: 1, output_price: 2 },
              ],
            },
          ],
        }),
        { KEY_EU: 'sk-eu' },
      );
      expect(model.deployments).toEqual([
        { label: 'eu', provider: 'openai', apiKey: 'sk-eu', keySource: 'env KEY_EU', upstreamModel: 'gpt-4o-mini', weight: 3, rpm: 500, tpm: 90000, region: 'eu' },
        expect.objectContaining({ label: 'compat', apiKey: 'sk-from-file', upstreamModel: 'other', weight: 1, baseUrl: 'http://127.0.0.1:9/v1', prices: { inputPrice: 1, outputPrice: 2, cachedInputPrice: 1, cacheWritePrice: 1 } }),
      ]);
    });

    it('names the model and the deployment of every problem, and never prints a key', () => {
      const file = catalogFile({
        models: [
          {
            ...base,
            deployments: [
              { label: 'a', provider: 'openai', api_key_env: 'MISSING_VARIABLE' },
              { label: 'b', provider: 'openai', api_key_env: 'KEY_B', weight: 0 },
              { label: 'c', provider: 'nobody', api_key_env: 'KEY_B' },
              { label: 'd', provider: 'openai', api_key: 'sk-secret-in-file' },
              { label: 'a', provider: 'openai', api_key_file: '/no/such/file' },
            ],
            fallbacks: ['dearer', 'unknown'],
          },
          { ...base, id: 'dearer', input_price: 99999 },
        ],
      });
      let message = '';
      try {
        loadCatalogFile(file, { KEY_B: 'sk-b' });
      } catch (error) {
        message = (error as Error).message;
      }
      expect(message).toContain('models[0] ("gpt-4o-mini").deployments[0] ("a").api_key_env: the variable MISSING_VARIABLE is not set');
      expect(message).toContain('deployments[1] ("b").weight must be a whole number >= 1');
      expect(message).toContain('deployments[2] ("c").provider must be one of openai, anthropic, google');
      expect(message).toContain('deployments[3] ("d").api_key: the key itself does not belong in the catalog');
      expect(message).toContain('deployments[4] ("a").label "a" appears twice');
      expect(message).toContain('/no/such/file could not be read (ENOENT)');
      expect(message).toContain('fallbacks: "dearer" costs more than "gpt-4o-mini"');
      expect(message).toContain('fallbacks: "unknown" is not a model of the catalog');
      expect(message).not.toContain('sk-secret-in-file');
      expect(message).not.toContain('sk-b');
    });

    it('refuses a key pasted into api_key_env or api_key_file without printing it back', () => {
      const pasted = 'sk-proj-abcdef0123456789ABCDEF0123456789';
      const file = catalogFile({
        models: [
          {
            ...base,
            deployments: [
              { label: 'pasted', provider: 'openai', api_key_env: pasted },
              { label: 'spaced', provider: 'openai', api_key_env: 'MY KEY' },
              { label: 'path', provider: 'openai', api_key_file: `/run/secrets/${pasted}` },
            ],
          },
        ],
      });
      let message = '';
      try {
        loadCatalogFile(file, {});
      } catch (error) {
        message = (error as Error).message;
      }
      expect(message).toContain('deployments[0] ("pasted").api_key_env must name an environment variable (letters, digits and _), not hold a key');
      expect(message).toContain('deployments[1] ("spaced").api_key_env must name an environment variable');
      expect(message).toContain('deployments[2] ("path").api_key_file: /run/secrets/sk-[redacted] could not be read (ENOENT)');
      expect(message).not.toContain('MY KEY');
      expect(message).not.toContain('abcdef0123');
    });

    it('stops the start as a configuration error (a message, no stack)', () => {
      expect(() => loadCatalogFile(catalogFile('{nope'))).toThrow(ConfigError);
      expect(() => loadCatalogFile(catalogFile({ models: [{ id: 'x' }] }))).toThrow(ConfigError);
    });
  });

  it('reads embedding models: kind, dimensions, whether they may be lowered; naming what is wrong', () => {
    const models = loadCatalogFile(
      catalogFile({
        models: [
          { id: 'local/bge', provider: 'openai', kind: 'embedding', dimensions: 1024, input_price: 0 },
          { id: 'e3', provider: 'openai', kind: 'embedding', dimensions: 1536, adjustable_dimensions: true, max_input_tokens: 8192, vocabulary_size: 100_277, input_price: 2000 },
          { id: 'chat', provider: 'openai', context_length: 8192, input_price: 1, output_price: 2 },
        ],
      }),
    );
    expect(models[0]).toMatchObject({ kind: 'embedding', embedding: { dimensions: 1024, adjustableDimensions: false, maxInputTokens: 8192 }, outputPrice: 0, contextLength: 8192, functionCalling: false });
    expect(models[1]).toMatchObject({ embedding: { dimensions: 1536, adjustableDimensions: true, vocabularySize: 100_277 } });
    expect(models[0].embedding!.vocabularySize).toBeUndefined();
    expect(isChatModel(models[2])).toBe(true);
    expect(models[2].kind).toBeUndefined();
    const bad = catalogFile({
      models: [
        { id: 'a', provider: 'openai', kind: 'vectors', context_length: 1, input_price: 1, output_price: 1 },
        { id: 'b', provider: 'openai', kind: 'embedding', input_price: 1, output_price: 5, adjustable_dimensions: 'yes' },
        { id: 'v', provider: 'openai', kind: 'embedding', dimensions: 8, input_price: 1, vocabulary_size: 0 },
      ],
    });
    expect(() => loadCatalogFile(bad)).toThrow(
      /kind must be one of chat, embedding[\s\S]*adjustable_dimensions must be true or false[\s\S]*output_price must be 0[\s\S]*dimensions must be a whole number[\s\S]*vocabulary_size must be a whole number/,
    );
  });

  it('refuses a fallback of another kind', () => {
    const file = catalogFile({
      models: [
        { id: 'e', provider: 'openai', kind: 'embedding', dimensions: 8, input_price: 1, fallbacks: ['c'] },
        { id: 'c', provider: 'openai', context_length: 8, input_price: 0, output_price: 0 },
      ],
    });
    expect(() => loadCatalogFile(file)).toThrow(/not of the same kind/);
  });
});
