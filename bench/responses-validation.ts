/**
 * CPU time of a Responses request before the chat core: validation by its DTO classes
 * (create-response.dto.ts) and translation into the chat body (chat-translation.ts), for the
 * smallest request an SDK sends and for a typical one (history, a tool call and its output,
 * an image, two function tools). No database or network: `node dist/bench/responses-validation.js`
 * after `npm run build`. The app's modules are loaded first, so that class-validator's
 * metadata holds every DTO class as in the server.
 */
import '../src/app.module';
import { toChatMessages, toResponsesRequest } from '../src/responses/chat-translation';
import { validateResponsesRequest } from '../src/responses/dto/create-response.dto';

const WEATHER = { type: 'object', properties: { city: { type: 'string' } }, required: ['city'], additionalProperties: false };

const BODIES: Record<string, () => Record<string, unknown>> = {
  minimal: () => ({ model: 'gpt-4o-mini', input: 'What is the capital of France?' }),
  typical: () => ({
    model: 'gpt-4o-mini',
    instructions: 'You are terse.',
    input: [
      { role: 'user', content: 'What is the weather in Paris?' },
      { type: 'function_call', call_id: 'call_1', name: 'get_weather', arguments: '{"city":"Paris"}' },
      { type: 'function_call_output', call_id: 'call_1', output: 'Sunny, 21 C' },
      { type: 'message', role: 'user', content: [{ type: 'input_text', text: 'And in Oslo?' }, { type: 'input_image', image_url: 'https://x.example/a.png' }] },
    ],
    tools: [
      { type: 'function', name: 'get_weather', description: 'Current weather', parameters: WEATHER, strict: true },
      { type: 'function', name: 'get_time', parameters: WEATHER },
    ],
    max_output_tokens: 256,
    temperature: 0.7,
    metadata: { app: 'bench' },
    user: 'end-user-7',
  }),
};

/** The bodies name function tools only: no hosted tool type to look up. */
const NO_HOSTED_TOOLS = new Map<string, string>();

function prepare(body: Record<string, unknown>): unknown {
  const request = toResponsesRequest(validateResponsesRequest(body), NO_HOSTED_TOOLS);
  return toChatMessages(request.echo.instructions, request.input);
}

for (const [name, body] of Object.entries(BODIES)) {
  for (let i = 0; i < 20_000; i++) prepare(body());
  const rounds: number[] = [];
  for (let round = 0; round < 7; round++) {
    const count = 20_000;
    const start = process.hrtime.bigint();
    for (let i = 0; i < count; i++) prepare(body());
    rounds.push(Number(process.hrtime.bigint() - start) / count / 1000);
  }
  rounds.sort((a, b) => a - b);
  console.log(`${name}: median ${rounds[3].toFixed(1)} µs a request (fastest round ${rounds[0].toFixed(1)} µs)`);
}
