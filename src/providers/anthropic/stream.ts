import type { RawMessageStreamEvent } from '@anthropic-ai/sdk/resources/messages';
import type { ChatCompletionChunk } from '../provider-adapter';
import type { AnswerFormat } from './request';
import { type AnthropicUsage, answerText, type FinishReason, nowSeconds, toFinishReason, toUsage } from './response';

// Anthropic raw stream events -> OpenAI chunks.

type ChunkDelta = ChatCompletionChunk['choices'][number]['delta'];

/**
 * Turns raw Messages stream events into chat completion chunks: the role chunk at
 * message_start, content and tool call deltas, the finishing chunk, and at message_stop a
 * last chunk with no choices and the usage.
 */
export class StreamTranslator {
  /** True once message_stop arrived: the answer is complete. */
  finished = false;
  private id = '';
  private readonly created = nowSeconds();
  /** Content block index -> the tool call's ordinal among tool calls, and whether it got arguments. */
  private readonly tools = new Map<number, { index: number; hasArguments: boolean }>();
  private usage: AnthropicUsage = {};
  private finishReason: FinishReason | undefined;
  /** The answer tool's block (see `answerFormat`): its input streams as content, or is gathered when wrapped. */
  private answerBlock?: { index: number; json: string };

  constructor(
    private readonly modelId: string,
    private readonly answer?: AnswerFormat,
  ) {}

  push(event: RawMessageStreamEvent): ChatCompletionChunk[] {
    switch (event.type) {
      case 'message_start':
        this.id = event.message.id;
        this.usage = { ...event.message.usage };
        return [this.chunk({ role: 'assistant', content: '' })];
      case 'content_block_start': {
        const block = event.content_block;
        if (block.type === 'text') return block.text ? [this.chunk({ content: block.text })] : [];
        if (block.type !== 'tool_use') return []; // thinking, and tools Anthropic runs itself
        if (this.answer && block.name === this.answer.name && !this.answerBlock) {
          this.answerBlock = { index: event.index, json: '' };
          return [];
        }
        const tool = { index: this.tools.size, hasArguments: false };
        this.tools.set(event.index, tool);
        const input = block.input as Record<string, unknown> | undefined;
        const initial = input && Object.keys(input).length > 0 ? JSON.stringify(input) : '';
        tool.hasArguments = initial !== '';
        return [
          this.chunk({ tool_calls: [{ index: tool.index, id: block.id, type: 'function', function: { name: block.name, arguments: initial } }] }),
        ];
      }
      case 'content_block_delta': {
        const delta = event.delta;
        if (delta.type === 'text_delta') return delta.text ? [this.chunk({ content: delta.text })] : [];
        if (this.answerBlock?.index === event.index && delta.type === 'input_json_delta') {
          this.answerBlock.json += delta.partial_json;
          // An object answer streams as it comes; a wrapped one is unwrapped once whole.
          return delta.partial_json && !this.answer!.wrapped ? [this.chunk({ content: delta.partial_json })] : [];
        }
        const tool = this.tools.get(event.index);
        if (delta.type !== 'input_json_delta' || !tool || !delta.partial_json) return [];
        tool.hasArguments = true;
        return [this.chunk({ tool_calls: [{ index: tool.index, function: { arguments: delta.partial_json } }] })];
      }
      case 'content_block_stop': {
        if (this.answerBlock?.index === event.index) return this.finishAnswer();
        // A call without parameters streams no JSON at all; OpenAI clients expect "{}".
        const tool = this.tools.get(event.index);
        if (!tool || tool.hasArguments) return [];
        tool.hasArguments = true;
        return [this.chunk({ tool_calls: [{ index: tool.index, function: { arguments: '{}' } }] })];
      }
      case 'message_delta': {
        // Counts in message_delta are cumulative; input counts come with message_start and, lately, here too.
        const u = event.usage;
        this.usage = {
          input_tokens: u.input_tokens ?? this.usage.input_tokens,
          output_tokens: u.output_tokens ?? this.usage.output_tokens,
          cache_read_input_tokens: u.cache_read_input_tokens ?? this.usage.cache_read_input_tokens,
          cache_creation_input_tokens: u.cache_creation_input_tokens ?? this.usage.cache_creation_input_tokens,
        };
        if (!event.delta.stop_reason || this.finishReason) return [];
        this.finishReason = toFinishReason(event.delta.stop_reason, this.tools.size > 0);
        return [this.chunk({}, this.finishReason)];
      }
      case 'message_stop': {
        this.finished = true;
        const chunks: ChatCompletionChunk[] = [];
        if (!this.finishReason) {
          this.finishReason = 'stop';
          chunks.push(this.chunk({}, 'stop'));
        }
        chunks.push({ id: this.id, object: 'chat.completion.chunk', created: this.created, model: this.modelId, choices: [], usage: toUsage(this.usage) });
        return chunks;
      }
      default:
        return [];
    }
  }

  private finishAnswer(): ChatCompletionChunk[] {
    const { json } = this.answerBlock!;
    if (!this.answer!.wrapped) return json ? [] : [this.chunk({ content: '{}' })];
    let input: unknown;
    try {
      input = JSON.parse(json || '{}');
    } catch {
      return json ? [this.chunk({ content: json })] : []; // cut short (max_tokens): what came, as it came
    }
    return [this.chunk({ content: answerText(input, this.answer!) })];
  }

  private chunk(delta: ChunkDelta, finishReason: FinishReason | null = null): ChatCompletionChunk {
    return {
      id: this.id,
      object: 'chat.completion.chunk',
      created: this.created,
      model: this.modelId,
      choices: [{ index: 0, delta, finish_reason: finishReason, logprobs: null }],
    };
  }
}
