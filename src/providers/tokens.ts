import { countTokens } from 'gpt-tokenizer';
import type { ChatMessage, FunctionTool } from './provider-adapter';

/** What OpenAI bills for an image at `detail: low`, and a high-detail 1024x1024 image. */
const IMAGE_TOKENS = { low: 85, high: 765 };
const TOKENS_PER_MESSAGE = 4;
const REPLY_PRIMING_TOKENS = 3;

export function countTextTokens(text: string): number {
  return text ? countTokens(text) : 0;
}

/**
 * Prompt tokens of a request, counted with the o200k tokenizer. Exact for OpenAI's current
 * models and an estimate for others: it sizes the wallet hold, while charges use the
 * provider's own counts whenever it reports them.
 */
export function countPromptTokens(messages: ChatMessage[], tools: FunctionTool[] = []): number {
  let total = REPLY_PRIMING_TOKENS;
  for (const message of messages) {
    total += TOKENS_PER_MESSAGE;
    const content = (message as { content?: unknown }).content;
    if (typeof content === 'string') {
      total += countTextTokens(content);
    } else if (Array.isArray(content)) {
      for (const part of content as Array<{ type: string; text?: string; image_url?: { detail?: string } }>) {
        if (part.type === 'text') total += countTextTokens(part.text ?? '');
        else if (part.type === 'image_url') total += part.image_url?.detail === 'low' ? IMAGE_TOKENS.low : IMAGE_TOKENS.high;
      }
    }
    const toolCalls = (message as { tool_calls?: unknown[] }).tool_calls;
    if (toolCalls?.length) total += countTextTokens(JSON.stringify(toolCalls));
  }
  if (tools.length > 0) total += countTextTokens(JSON.stringify(tools));
  return total;
}
