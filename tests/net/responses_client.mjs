// The official `openai` SDK's Responses API (client.responses.create / .stream) against astrai
// serve: the same sampled text as chat completions for the same conversation, the typed stream
// events in order, input items (messages, function calls and their outputs) with function tools,
// and a 400 naming the field for what the server does not support.
import { require, assert, base, run, sampled, postJson, randomWord } from './lib.mjs';

const { OpenAI } = require('openai');
const client = new OpenAI({ baseURL: base + '/v1', apiKey: process.env.ASTRAI_TEST_KEY || 'unused', maxRetries: 0 });
const model = (await (await fetch(base + '/v1/models')).json()).data[0].id;

// What chat completions answers for instructions + input with the same sampling.
async function chatRef(instructions, input, max_tokens, extra = {}) {
  const messages = [{ role: 'system', content: instructions }, { role: 'user', content: input }];
  return client.chat.completions.create({ model, messages, max_tokens, ...sampled, ...extra });
}

async function expect400(params, param) {
  try {
    await client.responses.create({ model, input: 'hi', max_output_tokens: 2, ...params });
  } catch (e) {
    assert.equal(e.status, 400, String(e));
    assert.equal(e.param, param, e.message);
    assert.ok(e.message.includes(param), e.message);
    return;
  }
  throw new Error('expected a 400 for ' + JSON.stringify(params));
}

await run([
  ['responses.create: the chat text for the same conversation, usage and status', async () => {
    const instructions = 'Be terse.', input = 'Tell me about ' + randomWord();
    const ref = await chatRef(instructions, input, 12, { top_p: 0.95 });
    const r = await client.responses.create({ model, instructions, input, max_output_tokens: 12, top_p: 0.95, ...sampled });
    assert.equal(r.object, 'response');
    assert.ok(r.id.startsWith('resp_'));
    assert.equal(r.model, model);
    assert.equal(r.instructions, instructions);
    assert.equal(r.max_output_tokens, 12);
    assert.equal(r.top_p, 0.95);
    assert.equal(r.temperature, sampled.temperature);
    assert.equal(r.output_text, ref.choices[0].message.content);
    assert.equal(r.output.length, 1);
    assert.equal(r.output[0].type, 'message');
    assert.equal(r.output[0].role, 'assistant');
    assert.equal(r.usage.input_tokens, ref.usage.prompt_tokens);
    assert.equal(r.usage.output_tokens, ref.usage.completion_tokens);
    assert.equal(r.usage.total_tokens, r.usage.input_tokens + r.usage.output_tokens);
    const length = ref.choices[0].finish_reason === 'length';
    assert.equal(r.status, length ? 'incomplete' : 'completed');
    assert.deepEqual(r.incomplete_details, length ? { reason: 'max_output_tokens' } : null);
  }],
  ['streaming: created, in_progress, item and part events around the deltas, then the final response', async () => {
    const instructions = 'Answer.', input = 'Stream about ' + randomWord();
    const ref = await client.responses.create({ model, instructions, input, max_output_tokens: 16, ...sampled });
    const stream = await client.responses.create({ model, instructions, input, max_output_tokens: 16, ...sampled,
                                                   stream: true });
    const events = [];
    for await (const ev of stream) events.push(ev);
    events.forEach((ev, i) => assert.equal(ev.sequence_number, i));
    const types = events.map((e) => e.type);
    const deltas = events.filter((e) => e.type === 'response.output_text.delta');
    const head = ['response.created', 'response.in_progress', 'response.output_item.added',
                  'response.content_part.added'];
    const tail = ['response.output_text.done', 'response.content_part.done', 'response.output_item.done',
                  'response.' + (ref.status === 'incomplete' ? 'incomplete' : 'completed')];
    assert.deepEqual(types, [...head, ...deltas.map((e) => e.type), ...tail]);
    assert.equal(events[0].response.status, 'in_progress');
    assert.deepEqual(events[0].response.output, []);
    const text = deltas.map((e) => e.delta).join('');
    assert.equal(text, ref.output_text);
    const itemId = events[2].item.id;
    for (const e of deltas) assert.equal(e.item_id, itemId);
    assert.equal(events.at(-4).text, text);
    const last = events.at(-1).response;
    assert.equal(last.output[0].content[0].text, text);
    assert.equal(last.usage.output_tokens, ref.usage.output_tokens);
    // The SDK's own accumulator agrees.
    const s = client.responses.stream({ model, instructions, input, max_output_tokens: 16, ...sampled });
    const final = await s.finalResponse();
    assert.equal(final.output_text, ref.output_text);
  }],
  ['input items: messages with content parts, a function call and its output, function tools', async () => {
    const word = randomWord();
    const tools = [{ type: 'function', name: 'get_weather', description: 'Weather of a city',
                     parameters: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] } }];
    const input = [
      { role: 'developer', content: 'Use tools.' },
      { type: 'message', role: 'user', content: [{ type: 'input_text', text: 'Weather in ' + word + '?' }] },
      { type: 'function_call', call_id: 'call_1', name: 'get_weather', arguments: '{"city":"' + word + '"}' },
      { type: 'function_call_output', call_id: 'call_1', output: 'cold' },
    ];
    const r = await client.responses.create({ model, input, tools, max_output_tokens: 4, ...sampled });
    assert.deepEqual(r.tools.map((t) => t.name), ['get_weather']);
    const messages = [
      { role: 'system', content: 'Use tools.' },
      { role: 'user', content: 'Weather in ' + word + '?' },
      { role: 'assistant', content: '', tool_calls: [{ id: 'call_1', type: 'function',
        function: { name: 'get_weather', arguments: '{"city":"' + word + '"}' } }] },
      { role: 'tool', tool_call_id: 'call_1', content: 'cold' },
    ];
    const chatTools = [{ type: 'function', function: { name: 'get_weather', description: 'Weather of a city',
                                                       parameters: tools[0].parameters } }];
    const ref = await client.chat.completions.create({ model, messages, tools: chatTools, max_tokens: 4, ...sampled });
    assert.equal(r.usage.input_tokens, ref.usage.prompt_tokens);
  }],
  ['what the server does not support is a 400 naming the field', async () => {
    await expect400({ store: true }, 'store');
    await expect400({ previous_response_id: 'resp_123' }, 'previous_response_id');
    await expect400({ background: true }, 'background');
    await expect400({ tools: [{ type: 'web_search' }] }, 'tools[0].type');
    await expect400({ include: ['reasoning.encrypted_content'] }, 'include');
    await expect400({ text: { format: { type: 'grammar' } } }, 'text.format.type');
    await expect400({ truncation: 'auto' }, 'truncation');
    await expect400({ input: [{ role: 'user', content: [{ type: 'input_image', image_url: 'x' }] }] },
                    'input[0].content[0].type');
    await expect400({ max_output_tokens: 0 }, 'max_output_tokens');
    await expect400({ temperature: 3 }, 'temperature');
    const r = await postJson('/v1/responses', { model });
    assert.equal(r.status, 400);
    assert.equal(r.json.error.param, 'input');
    // store: false and background: false ask for what the server does anyway.
    const ok = await client.responses.create({ model, input: 'hi', max_output_tokens: 2, store: false, background: false });
    assert.equal(ok.store, false);
  }],
]);
