import { startTestApp, TestApp } from './support/test-app';

interface OpenApiDocument {
  paths: Record<string, Record<string, { security?: unknown[]; responses: Record<string, { headers?: Record<string, unknown> }> }>>;
  components: { securitySchemes?: Record<string, unknown>; headers?: Record<string, unknown>; schemas: Record<string, unknown> };
}

describe('OpenAPI document and Swagger UI', () => {
  let t: TestApp;
  let document: OpenApiDocument;

  beforeAll(async () => {
    t = await startTestApp();
    document = (await (await fetch(`${t.baseUrl}/docs/openapi.json`)).json()) as OpenApiDocument;
  });
  afterAll(() => t.close());

  it('serves Swagger UI at /docs without a key', async () => {
    const response = await fetch(`${t.baseUrl}/docs`);
    expect(response.status).toBe(200);
    expect(await response.text()).toContain('swagger-ui');
  });

  it('documents every endpoint', () => {
    expect(Object.keys(document.paths)).toEqual(
      expect.arrayContaining([
        '/health',
        '/health/ready',
        '/v1/chat/completions',
        '/v1/limits',
        '/v1/limits/tiers',
        '/v1/models',
        '/v1/models/{id}',
        '/v1/responses',
        '/v1/responses/{id}',
        '/v1/responses/{id}/input_items',
        '/v1/wallet',
        '/v1/wallet/transactions',
      ]),
    );
  });

  it('declares bearer auth, the rate-limit headers and the error responses on /v1 routes', () => {
    expect(document.components.securitySchemes?.bearer).toMatchObject({ type: 'http', scheme: 'bearer' });
    for (const [path, methods] of Object.entries(document.paths)) {
      if (!path.startsWith('/v1')) continue;
      for (const operation of Object.values(methods)) {
        expect(operation.security).toEqual([{ bearer: [] }]);
        for (const status of ['200', '401', '429', '500']) {
          expect(operation.responses[status]?.headers).toHaveProperty('X-RateLimit-Remaining');
        }
        expect(operation.responses['429'].headers).toHaveProperty('Retry-After');
      }
    }
    expect(document.paths['/v1/models/{id}'].get.responses).toHaveProperty('404');
    expect(document.components.schemas).toHaveProperty('ErrorBodyDto');
  });
});
