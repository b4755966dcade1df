import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import * as path from 'node:path';
import { DEFAULT_CATALOG, loadCatalogFile } from './model-catalog';

function catalogFile(content: unknown): string {
  const file = path.join(mkdtempSync(path.join(tmpdir(), 'catalog-')), 'models.json');
  writeFileSync(file, typeof content === 'string' ? content : JSON.stringify(content));
  return file;
}

describe('model catalog', () => {
  it('holds the spec eight models with unique ids and prices', () => {
    expect(DEFAULT_CATALOG).toHaveLength(8);
    expect(new Set(DEFAULT_CATALOG.map((m) => m.id)).size).toBe(8);
    for (const m of DEFAULT_CATALOG) {
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

  it('refuses a file that is not JSON or has no models', () => {
    expect(() => loadCatalogFile(catalogFile('{nope'))).toThrow(/could not be read as JSON/);
    expect(() => loadCatalogFile(catalogFile({ models: [] }))).toThrow(/at least one model/);
  });
});
