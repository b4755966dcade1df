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

  it('describes the Responses request from the classes that validate it', () => {
    const body = (document.paths['/v1/responses'].post as unknown as { requestBody: { content: Record<string, { schema: { $ref: string } }> } }).requestBody;
    expect(body.content['application/json'].schema.$ref).toBe('#/components/schemas/CreateResponseRequestDto');
    const schemas = document.components.schemas as Record<string, { properties: Record<string, { enum?: string[] }> }>;
    expect(Object.keys(schemas.CreateResponseRequestDto.properties)).toEqual(expect.arrayContaining(['input', 'tools', 'previous_response_id', 'store', 'stream']));
    expect(Object.keys(schemas.ToolDto.properties)).toEqual(expect.arrayContaining(['type', 'name', 'parameters', 'vector_store_ids']));
    expect(Object.keys(schemas.InputItemDto.properties)).toEqual(expect.arrayContaining(['type', 'role', 'content', 'call_id', 'output']));
    expect(schemas.ContentPartDto.properties.type.enum).toEqual(expect.arrayContaining(['input_text', 'input_image', 'input_file', 'input_audio']));
  });

  it('describes /v1/embeddings: its request, OpenAI answer and errors', () => {
    const operation = document.paths['/v1/embeddings'].post as unknown as {
      requestBody: { content: Record<string, { schema: { $ref: string } }> };
      responses: Record<string, { content?: Record<string, { schema: { $ref: string } }> }>;
    };
    expect(operation.requestBody.content['application/json'].schema.$ref).toBe('#/components/schemas/CreateEmbeddingRequestDto');
    expect(operation.responses['200'].content!['application/json'].schema.$ref).toBe('#/components/schemas/CreateEmbeddingResponseDto');
    expect(Object.keys(operation.responses)).toEqual(expect.arrayContaining(['400', '402', '403', '429']));
    const schemas = document.components.schemas as Record<string, { properties: Record<string, { enum?: string[]; oneOf?: unknown[] }>; required?: string[] }>;
    const request = schemas.CreateEmbeddingRequestDto;
    expect(request.required).toEqual(expect.arrayContaining(['model', 'input']));
    expect(request.properties.input.oneOf).toHaveLength(4);
    expect(request.properties.encoding_format.enum).toEqual(['float', 'base64']);
    expect(Object.keys(request.properties)).toEqual(expect.arrayContaining(['dimensions', 'user']));
    expect(Object.keys(schemas.CreateEmbeddingResponseDto.properties)).toEqual(expect.arrayContaining(['object', 'data', 'model', 'usage', 'x_service']));
  });
});
