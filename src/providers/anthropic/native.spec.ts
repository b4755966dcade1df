import { Cancellation } from '../../common/cancellation';
import { DEFAULT_CATALOG } from '../../models/model-catalog';
import type { ProviderRequest } from '../provider-adapter';
import { forwardedBetaFlags, nativeCall, nativeCountCall } from './native';

const MODEL = { ...DEFAULT_CATALOG.find((m) => m.id === 'claude-haiku-4-5')!, upstreamModel: 'claude-upstream' };

function request(body: Record<string, unknown>, options: { maxTokens?: number; beta?: string[] } = {}): ProviderRequest {
  return {
    model: MODEL,
    messages: [],
    maxTokens: options.maxTokens ?? 4096,
    extra: {},
    cancellation: new Cancellation(),
    native: { anthropic: { body: { model: 'asked', max_tokens: 32000, messages: [{ role: 'user', content: 'Hi' }], ...body }, beta: options.beta ?? [] } },
  };
}

describe('Anthropic native calls', () => {
  it('forwards the known beta flags of every header value, once; drops the others', () => {
    expect(forwardedBetaFlags(['claude-code-20250219,interleaved-thinking-2025-05-14', ' context-1m-2025-08-07 , fine-grained-tool-streaming-2025-05-14', 'interleaved-thinking-2025-05-14'])).toEqual([
      'interleaved-thinking-2025-05-14',
      'fine-grained-tool-streaming-2025-05-14',
    ]);
    expect(nativeCall(request({}, { beta: ['made-up'] }), false)!.headers).toEqual({});
  });

  it("sets the deployment's model and the call's cap; keeps Anthropic's fields; drops those billed apart or unknown", () => {
    const { params } = nativeCall(
      request({
        system: [{ type: 'text', text: 'S', cache_control: { type: 'ephemeral' } }],
        output_config: { effort: 'low' },
        context_management: { edits: [] },
        service_tier: 'auto',
        speed: 'fast',
        container: 'c',
        mcp_servers: [],
        x_unknown: 1,
        stream: true,
      }),
      false,
    )!;
    expect(params).toEqual({
      model: 'claude-upstream',
      max_tokens: 4096,
      messages: [{ role: 'user', content: 'Hi' }],
      system: [{ type: 'text', text: 'S', cache_control: { type: 'ephemeral' } }],
      output_config: { effort: 'low' },
    });
    // context_management goes with its beta flag only; a stream says so.
    expect(nativeCall(request({ context_management: { edits: [] } }, { beta: ['context-management-2025-06-27'] }), true)!.params).toMatchObject({
      context_management: { edits: [] },
      stream: true,
    });
  });

  it("keeps custom tools only (server tools are billed per use), and a tool_choice only when it still has a tool", () => {
    const custom = { name: 'f', input_schema: { type: 'object' }, cache_control: { type: 'ephemeral' } };
    const search = { type: 'web_search_20250305', name: 'web_search' };
    expect(nativeCall(request({ tools: [custom, search], tool_choice: { type: 'any' } }), false)!.params).toMatchObject({ tools: [custom], tool_choice: { type: 'any' } });
    expect(nativeCall(request({ tools: [search], tool_choice: { type: 'tool', name: 'web_search' } }), false)!.params).not.toHaveProperty('tool_choice');
    expect(nativeCall(request({ tools: [custom, search], tool_choice: { type: 'tool', name: 'web_search' } }), false)!.params).not.toHaveProperty('tool_choice');
  });

  it('lowers a thinking budget the lowered cap no longer leaves room for, or turns thinking off', () => {
    const thinking = { type: 'enabled', budget_tokens: 8000 };
    expect(nativeCall(request({ thinking }, { maxTokens: 4096 }), false)!.params.thinking).toEqual({ type: 'enabled', budget_tokens: 4095 });
    expect(nativeCall(request({ thinking }, { maxTokens: 1000 }), false)!.params).not.toHaveProperty('thinking');
    expect(nativeCall(request({ thinking: { type: 'adaptive' } }, { maxTokens: 1000 }), false)!.params.thinking).toEqual({ type: 'adaptive' });
  });

  it('is translated instead when a system message sits in messages; count_tokens has no cap or metadata', () => {
    expect(nativeCall(request({ messages: [{ role: 'user', content: 'a' }, { role: 'system', content: 'b' }] }), false)).toBeUndefined();
    expect(nativeCountCall(request({ metadata: { user_id: 'u' }, temperature: 0.5, thinking: { type: 'adaptive' } }))!.params).toEqual({
      model: 'claude-upstream',
      messages: [{ role: 'user', content: 'Hi' }],
      thinking: { type: 'adaptive' },
    });
  });
});
