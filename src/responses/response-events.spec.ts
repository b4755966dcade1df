import { firstValueFrom, Observable, Subject, toArray } from 'rxjs';
import { ChatCompletionChunkResponse, ChatStreamEvent, KEEP_ALIVE, KeepAlive } from '../chat/completion-types';
import { ApiError } from '../common/errors/api-error';
import { ResponseEvent, responseEvents } from './response-events';
import { MessageItem, ResponseObject, startResponse } from './response-object';
import type { ToolCallItem } from './tool-call-items';

const ECHO = {
  instructions: null,
  max_output_tokens: null,
  metadata: {},
  parallel_tool_calls: true,
  previous_response_id: null,
  store: true,
  temperature: null,
  text: { format: { type: 'text' } },
  tool_choice: 'auto',
  tools: [],
  top_p: null,
  truncation: 'disabled' as const,
  user: null,
};

type Delta = ChatCompletionChunkResponse['choices'][number]['delta'];

function chunk(delta: Delta, finish: string | null = null, extra: Partial<ChatCompletionChunkResponse> = {}): ChatCompletionChunkResponse {
  return {
    id: 'chatcmpl-1',
    object: 'chat.completion.chunk',
    created: 1,
    model: 'gpt-4o-mini',
    choices: [{ index: 0, delta, finish_reason: finish as never, logprobs: null }],
    ...extra,
  };
}

function run(
  chat: Observable<ChatStreamEvent>,
  finished: (response: ResponseObject) => Promise<void> = async () => undefined,
  onToolItem?: (emit: (item: ToolCallItem) => void) => void,
) {
  return responseEvents(chat, {
    start: (model) => startResponse('resp_1', model, ECHO, null),
    finished,
    toApiError: (error) => (error instanceof ApiError ? error : new ApiError('internal_error', 'boom')),
    onToolItem,
  });
}

const events = (list: Array<ResponseEvent | KeepAlive>) => list.filter((event): event is ResponseEvent => 'type' in event);

describe('responseEvents', () => {
  it("puts a server tool's call between the text before it and the answer, and each citation in the message its marker is in", async () => {
    let addItem: ((item: ToolCallItem) => void) | undefined;
    let completed: ResponseObject | undefined;
    const chat = new Subject<ChatStreamEvent>();
    const all = firstValueFrom(
      run(
        chat,
        async (response) => {
          completed = response;
        },
        (emit) => {
          addItem = emit;
        },
      ).pipe(toArray()),
    );
    const url = (start: number) => ({ type: 'url_citation', url_citation: { url: 'https://a.example/', title: 'A', start_index: start, end_index: start + 3 } });
    chat.next(chunk({ role: 'assistant', content: 'Looking [1]. ' }));
    addItem!({ type: 'web_search_call', id: 'ws_1', status: 'completed', action: { type: 'search', query: 'a' } });
    chat.next(chunk({ content: 'Found it [1].' }));
    // The chat stream's citations index its whole text: "Looking [1]. Found it [1]."
    chat.next(chunk({ annotations: [url(8), url(22)] } as Delta));
    chat.next(chunk({}, 'stop'));
    chat.complete();
    const list = events(await all);
    expect(completed!.output.map((item) => item.type)).toEqual(['message', 'web_search_call', 'message']);
    const texts = completed!.output.filter((item): item is MessageItem => item.type === 'message').map((item) => item.content[0]);
    expect(texts).toEqual([
      { type: 'output_text', text: 'Looking [1]. ', annotations: [{ type: 'url_citation', url: 'https://a.example/', title: 'A', start_index: 8, end_index: 11 }], logprobs: [] },
      { type: 'output_text', text: 'Found it [1].', annotations: [{ type: 'url_citation', url: 'https://a.example/', title: 'A', start_index: 9, end_index: 12 }], logprobs: [] },
    ]);
    const added = list.filter((event) => event.type === 'response.output_text.annotation.added');
    expect(added.map((event) => [event.output_index, event.annotation_index])).toEqual([
      [0, 0],
      [2, 0],
    ]);
    expect(list.map((event) => event.type)).toContain('response.web_search_call.completed');
  });

  it('turns text then a tool call into a message item closed before the function_call item, numbered in order', async () => {
    const usage = { prompt_tokens: 10, completion_tokens: 4, total_tokens: 14 };
    const chat = new Subject<ChatStreamEvent>();
    const all = firstValueFrom(run(chat).pipe(toArray()));
    chat.next(chunk({ role: 'assistant', content: 'Let me ' }));
    chat.next(chunk({ content: 'check.' }));
    chat.next(KEEP_ALIVE);
    chat.next(chunk({ tool_calls: [{ index: 0, id: 'call_1', type: 'function', function: { name: 'get_weather', arguments: '{"ci' } }] }));
    chat.next(chunk({ tool_calls: [{ index: 0, function: { arguments: 'ty":"Oslo"}' } }] }));
    chat.next(chunk({}, 'tool_calls'));
    chat.next({ ...chunk({}), choices: [], usage, x_service: { cost_millicents: 3, iterations: 1, tools_used: [], generated_files: null, provider: 'openai', deployment: 'openai', attempts: 1 } });
    chat.complete();
    const list = await all;

    expect(list).toContain(KEEP_ALIVE);
    const sent = events(list);
    expect(sent.map((event) => event.type)).toEqual([
      'response.created',
      'response.in_progress',
      'response.output_item.added',
      'response.content_part.added',
      'response.output_text.delta',
      'response.output_text.delta',
      'response.output_text.done',
      'response.content_part.done',
      'response.output_item.done',
      'response.output_item.added',
      'response.function_call_arguments.delta',
      'response.function_call_arguments.delta',
      'response.function_call_arguments.done',
      'response.output_item.done',
      'response.completed',
    ]);
    expect(sent.map((event) => event.sequence_number)).toEqual(sent.map((_, index) => index));
    // What response.created announced is not changed by the events after it.
    expect((sent[0].response as ResponseObject).output).toEqual([]);
    const final = sent[sent.length - 1].response as ResponseObject;
    expect(final.output).toEqual([
      expect.objectContaining({ type: 'message', status: 'completed', content: [expect.objectContaining({ type: 'output_text', text: 'Let me check.' })] }),
      expect.objectContaining({ type: 'function_call', call_id: 'call_1', name: 'get_weather', arguments: '{"city":"Oslo"}', status: 'completed' }),
    ]);
    expect(final.usage).toMatchObject({ input_tokens: 10, output_tokens: 4, total_tokens: 14 });
    expect(final.x_service).toMatchObject({ cost_millicents: 3 });
    expect(sent[10]).toMatchObject({ output_index: 1, delta: '{"ci' });
  });

  it('ends with response.incomplete when the answer was cut at the output cap', async () => {
    const list = await firstValueFrom(run(fromChunks([chunk({ content: 'Once upon' }), chunk({}, 'length')])).pipe(toArray()));
    const last = events(list).pop()!;
    expect(last.type).toBe('response.incomplete');
    expect(last.response).toMatchObject({ status: 'incomplete', incomplete_details: { reason: 'max_output_tokens' } });
  });

  it('stores the response before response.completed goes out', async () => {
    const order: string[] = [];
    const done = firstValueFrom(
      run(fromChunks([chunk({ content: 'Hi' }), chunk({}, 'stop')]), async (response) => {
        order.push(`stored ${response.status}`);
      }).pipe(toArray()),
    );
    for (const event of events(await done)) if (event.type === 'response.completed') order.push('completed');
    expect(order).toEqual(['stored completed', 'completed']);
  });

  it('a failure before the first chunk is the observable error; after it, response.failed then an error event', async () => {
    const refusal = ApiError.badRequest('nope', 'input');
    await expect(firstValueFrom(run(new Observable((subscriber) => subscriber.error(refusal))))).rejects.toBe(refusal);

    const chat = new Subject<ChatStreamEvent>();
    const all = firstValueFrom(run(chat).pipe(toArray()));
    chat.next(chunk({ content: 'Half' }));
    chat.error(new ApiError('upstream_error', 'The upstream broke', { code: 'upstream_stream_error' }));
    const sent = events(await all);
    expect(sent.slice(-2)).toEqual([
      expect.objectContaining({ type: 'response.failed', response: expect.objectContaining({ status: 'failed', error: { code: 'upstream_stream_error', message: 'The upstream broke' } }) }),
      expect.objectContaining({ type: 'error', code: 'upstream_stream_error', message: 'The upstream broke', param: null }),
    ]);
  });
});

function fromChunks(chunks: ChatStreamEvent[]): Observable<ChatStreamEvent> {
  return new Observable((subscriber) => {
    for (const item of chunks) subscriber.next(item);
    subscriber.complete();
  });
}
