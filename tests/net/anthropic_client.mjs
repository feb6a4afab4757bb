// The official `@anthropic-ai/sdk` against astrai serve: messages (non-streaming and streaming
// with the full event sequence), stop_sequences, max_tokens, tools, a forced tool (tool_choice
// {type: "tool"}) constrained by its input_schema, count_tokens, errors.
import { require, assert, base, run, sampled, sampledTry, postJson, chars, randomWord } from './lib.mjs';

const sdk = require('@anthropic-ai/sdk');
const Ajv = require('ajv');
const Anthropic = sdk.Anthropic || sdk.default || sdk;
const client = new Anthropic({ baseURL: base, apiKey: process.env.ASTRAI_TEST_KEY || 'unused', maxRetries: 0 });
const model = (await (await fetch(base + '/v1/models')).json()).data[0].id;
const userMsg = () => [{ role: 'user', content: 'Tell me about ' + randomWord() }];
const textOf = (m) => m.content.filter((b) => b.type === 'text').map((b) => b.text).join('');

await run([
  ['messages.create returns a message with text content and usage', async () => {
    const messages = userMsg();
    const m = await client.messages.create({ model, max_tokens: 10, messages, ...sampled, system: 'Be terse.' });
    assert.equal(m.type, 'message');
    assert.equal(m.role, 'assistant');
    assert.equal(m.content[0].type, 'text');
    assert.ok(['end_turn', 'max_tokens'].includes(m.stop_reason));
    assert.ok(m.usage.output_tokens <= 10);
    if (m.stop_reason === 'max_tokens') assert.equal(m.usage.output_tokens, 10);
    const count = await client.messages.countTokens({ model, messages, system: 'Be terse.' });
    assert.equal(count.input_tokens, m.usage.input_tokens);
  }],
  ['streaming sends the documented event sequence and the same text', async () => {
    const messages = userMsg();
    const ref = await client.messages.create({ model, max_tokens: 12, messages, ...sampled });
    const stream = await client.messages.create({ model, max_tokens: 12, messages, ...sampled, stream: true });
    const types = [];
    let text = '', stop = null, out = null;
    for await (const ev of stream) {
      types.push(ev.type);
      if (ev.type === 'content_block_delta') text += ev.delta.text;
      if (ev.type === 'message_delta') { stop = ev.delta.stop_reason; out = ev.usage.output_tokens; }
    }
    assert.equal(types[0], 'message_start');
    assert.equal(types.at(-1), 'message_stop');
    assert.equal(types.at(-2), 'message_delta');
    assert.ok(types.includes('content_block_start') && types.includes('content_block_stop'));
    const firstBlock = types.indexOf('content_block_start'), lastStop = types.lastIndexOf('content_block_stop');
    assert.ok(types.slice(firstBlock + 1, lastStop).every((t) => t === 'content_block_delta' || t === 'ping'));
    assert.equal(text, textOf(ref));
    assert.equal(stop, ref.stop_reason);
    assert.equal(out, ref.usage.output_tokens);
  }],
  ['the SDK stream helper assembles the final message', async () => {
    const messages = userMsg();
    const ref = await client.messages.create({ model, max_tokens: 8, messages, ...sampled });
    const final = await client.messages.stream({ model, max_tokens: 8, messages, ...sampled }).finalMessage();
    assert.equal(textOf(final), textOf(ref));
  }],
  ['stop_sequences end the message with stop_reason stop_sequence', async () => {
    let messages, text, params;
    for (let i = 0; i < 8; i++) {
      messages = userMsg();
      params = sampledTry(i);
      text = textOf(await client.messages.create({ model, max_tokens: 24, messages, ...params }));
      if (chars(text).length >= 8) break;
    }
    assert.ok(chars(text).length >= 8, 'the model never produced 8 characters');
    const cps = chars(text);
    const start = 2 + Math.floor(Math.random() * (cps.length - 4));
    const stop = cps.slice(start, start + 2).join('');
    const m = await client.messages.create({ model, max_tokens: 24, messages, ...params, stop_sequences: [stop] });
    assert.equal(textOf(m), text.slice(0, text.indexOf(stop)));
    assert.equal(m.stop_reason, 'stop_sequence');
    assert.equal(m.stop_sequence, stop);
  }],
  ['tools, tool_use and tool_result blocks are accepted', async () => {
    const tools = [{ name: 'get_weather', description: 'Weather of a city',
                     input_schema: { type: 'object', properties: { city: { type: 'string' } } } }];
    const messages = [
      { role: 'user', content: 'Weather in Oslo?' },
      { role: 'assistant', content: [{ type: 'tool_use', id: 'toolu_1', name: 'get_weather', input: { city: 'Oslo' } }] },
      { role: 'user', content: [{ type: 'tool_result', tool_use_id: 'toolu_1', content: 'cold' }] }];
    const m = await client.messages.create({ model, max_tokens: 6, messages, tools });
    assert.ok(['end_turn', 'max_tokens', 'tool_use'].includes(m.stop_reason));
  }],
  ['tool_choice {type: "tool"} forces that tool: a tool_use block whose input validates, streamed too', async () => {
    const weather = { type: 'object', additionalProperties: false, required: ['city', 'unit'],
                      properties: { city: { type: 'string', minLength: 1, maxLength: 10 }, unit: { enum: ['c', 'f'] },
                                    days: { type: 'integer', minimum: 1, maximum: 7 } } };
    const tools = [{ name: 'get_time', input_schema: { type: 'object', properties: { zone: { type: 'string' } } } },
                   { name: 'get_weather', description: 'Weather of a city', input_schema: weather }];
    const validate = new Ajv({ strict: true }).compile(weather);
    const body = { model, max_tokens: 300, temperature: 1, tools, tool_choice: { type: 'tool', name: 'get_weather' },
                   messages: userMsg() };
    const check = (m) => {
      assert.equal(m.stop_reason, 'tool_use', JSON.stringify(m));
      assert.deepEqual(m.content.map((b) => [b.type, b.name]), [['tool_use', 'get_weather']], JSON.stringify(m));
      assert.ok(validate(m.content[0].input), JSON.stringify(m.content[0].input));
    };
    for (const m of await Promise.all(Array.from({ length: 6 }, () => client.messages.create(body)))) check(m);
    const stream = client.messages.stream(body);
    let partial = '';
    stream.on('inputJson', (delta) => { partial += delta; });
    const final = await stream.finalMessage();
    check(final);
    assert.deepEqual(JSON.parse(partial), final.content[0].input);
    await assert.rejects(client.messages.create({ ...body, tool_choice: { type: 'tool', name: 'nope' } }),
      (e) => e.status === 400 && /tool_choice\.name/.test(e.message));
    await assert.rejects(client.messages.create({ ...body, tools: [{ name: 'get_weather', input_schema: {
      type: 'object', properties: { n: { type: 'integer', multipleOf: 2 } } } }] }),
      (e) => e.status === 400 && /tools\[0\]\.input_schema\.properties\.n/.test(e.message));
  }],
  ['errors use the Anthropic shape: missing max_tokens 400, unknown model 404', async () => {
    const r = await postJson('/v1/messages', { model, messages: userMsg() });
    assert.equal(r.status, 400);
    assert.equal(r.json.type, 'error');
    assert.equal(r.json.error.type, 'invalid_request_error');
    assert.match(r.json.error.message, /max_tokens/);
    await assert.rejects(client.messages.create({ model: 'nope', max_tokens: 4, messages: userMsg() }),
      (e) => e.status === 404 && e.error.error.type === 'not_found_error');
    await assert.rejects(client.messages.create({ model, max_tokens: 4, messages: [{ role: 'robot', content: 'x' }] }),
      (e) => e.status === 400 && /messages\[0\]\.role/.test(e.message));
  }],
]);
