// The official `openai` SDK against astrai serve: models, chat (non-streaming and streaming),
// completions, stop strings, max_tokens, tools, logprobs, errors.
import { require, assert, base, run, sampled, sampledTry, postJson, greedyChat, chars, randomWord } from './lib.mjs';

const { OpenAI } = require('openai');
const client = new OpenAI({ baseURL: base + '/v1', apiKey: process.env.ASTRAI_TEST_KEY || 'unused', maxRetries: 0 });
let model;
const userMsg = () => [{ role: 'user', content: 'Say something about ' + randomWord() }];

// A seeded output long enough to cut with a stop string, and the sampling that reproduces it (tries
// a few prompts and seeds).
async function longOutput() {
  for (let i = 0; i < 8; i++) {
    const messages = userMsg(), params = sampledTry(i);
    const r = await greedyChat(messages, 24, params);
    const text = r.choices[0].message.content;
    if (chars(text).length >= 8) return { messages, text, params };
  }
  throw new Error('the model never produced 8 characters');
}

await run([
  ['models.list names the served model', async () => {
    const list = await client.models.list();
    assert.equal(list.data.length, 1);
    model = list.data[0].id;
    assert.ok(model.length > 0);
  }],
  ['chat.completions.create (non-streaming) returns an assistant message and usage', async () => {
    const messages = userMsg();
    const r = await client.chat.completions.create({ model, messages, max_tokens: 12, ...sampled });
    assert.equal(r.object, 'chat.completion');
    assert.equal(r.choices.length, 1);
    assert.equal(r.choices[0].message.role, 'assistant');
    assert.equal(typeof r.choices[0].message.content, 'string');
    assert.ok(['stop', 'length'].includes(r.choices[0].finish_reason));
    assert.ok(r.usage.completion_tokens <= 12);
    if (r.choices[0].finish_reason === 'length') assert.equal(r.usage.completion_tokens, 12);
    // prompt_tokens agrees with the server's own tokenization of the rendered template.
    const tok = await postJson('/tokenize', { messages });
    assert.equal(r.usage.prompt_tokens, tok.json.count);
    assert.equal(r.usage.total_tokens, r.usage.prompt_tokens + r.usage.completion_tokens);
  }],
  ['max_tokens bounds the completion and reports length', async () => {
    for (const max_tokens of [1, 3, 7]) {
      const r = await client.chat.completions.create({ model, messages: userMsg(), max_tokens, ...sampled });
      assert.ok(r.usage.completion_tokens <= max_tokens);
      if (r.usage.completion_tokens === max_tokens) assert.equal(r.choices[0].finish_reason, 'length');
    }
  }],
  ['streaming deltas concatenate to the non-streaming text, with usage last', async () => {
    const messages = userMsg();
    const ref = await greedyChat(messages, 16);
    const stream = await client.chat.completions.create({
      model, messages, max_tokens: 16, ...sampled, stream: true, stream_options: { include_usage: true } });
    let text = '', finish = null, usage = null, chunks = 0, role = null;
    for await (const chunk of stream) {
      chunks++;
      assert.equal(chunk.object, 'chat.completion.chunk');
      if (chunk.usage) usage = chunk.usage;
      for (const c of chunk.choices) {
        if (c.delta.role) role = c.delta.role;
        if (c.delta.content) text += c.delta.content;
        if (c.finish_reason) finish = c.finish_reason;
      }
    }
    assert.equal(role, 'assistant');
    assert.equal(text, ref.choices[0].message.content);
    assert.equal(finish, ref.choices[0].finish_reason);
    assert.ok(usage, 'include_usage sends a usage chunk');
    assert.equal(usage.completion_tokens, ref.usage.completion_tokens);
    assert.ok(chunks >= 2);
  }],
  ['a stop string cuts the output before its first occurrence (streaming and not)', async () => {
    const { messages, text, params } = await longOutput();
    const cps = chars(text);
    const start = 2 + Math.floor(Math.random() * (cps.length - 4));
    const stop = cps.slice(start, start + 2).join('');
    const want = text.slice(0, text.indexOf(stop));
    const r = await client.chat.completions.create({ model, messages, max_tokens: 24, ...params, stop: [stop] });
    assert.equal(r.choices[0].message.content, want, `stop ${JSON.stringify(stop)}`);
    assert.equal(r.choices[0].finish_reason, 'stop');
    const stream = await client.chat.completions.create({ model, messages, max_tokens: 24, ...params, stop, stream: true });
    let streamed = '';
    for await (const chunk of stream) for (const c of chunk.choices) streamed += c.delta.content || '';
    assert.equal(streamed, want);
  }],
  ['n choices and seeded sampling are reproducible', async () => {
    const messages = userMsg();
    const a = await client.chat.completions.create({ model, messages, max_tokens: 8, temperature: 1, seed: 1234, n: 2 });
    const b = await client.chat.completions.create({ model, messages, max_tokens: 8, temperature: 1, seed: 1234, n: 2 });
    assert.equal(a.choices.length, 2);
    assert.deepEqual(a.choices.map((c) => c.message.content), b.choices.map((c) => c.message.content));
  }],
  ['logprobs come back per token, top_logprobs sorted and bounded by the sampled one', async () => {
    const r = await client.chat.completions.create({ model, messages: userMsg(), max_tokens: 5, temperature: 0,
                                                     logprobs: true, top_logprobs: 3 });
    const lp = r.choices[0].logprobs.content;
    assert.equal(lp.length, r.usage.completion_tokens);
    for (const t of lp) {
      assert.ok(t.logprob <= 0);
      assert.equal(t.top_logprobs.length, 3);
      for (let i = 1; i < 3; i++) assert.ok(t.top_logprobs[i - 1].logprob >= t.top_logprobs[i].logprob);
      // Greedy: the sampled token is the most likely one.
      assert.ok(Math.abs(t.top_logprobs[0].logprob - t.logprob) < 1e-4);
    }
  }],
  ['tools and a tool-result turn are accepted', async () => {
    const tools = [{ type: 'function', function: { name: 'get_weather', description: 'Weather of a city',
      parameters: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] } } }];
    const messages = [
      { role: 'user', content: 'Weather in Oslo?' },
      { role: 'assistant', content: null, tool_calls: [{ id: 'call_1', type: 'function',
        function: { name: 'get_weather', arguments: '{"city":"Oslo"}' } }] },
      { role: 'tool', tool_call_id: 'call_1', content: 'cold' }];
    const r = await client.chat.completions.create({ model, messages, tools, tool_choice: 'auto', max_tokens: 6 });
    assert.ok(['stop', 'length', 'tool_calls'].includes(r.choices[0].finish_reason));
  }],
  ['completions: string prompt, token-id prompt and echo', async () => {
    const prompt = 'The ' + randomWord();
    const r = await client.completions.create({ model, prompt, max_tokens: 6, ...sampled, echo: true });
    assert.equal(r.object, 'text_completion');
    assert.ok(r.choices[0].text.startsWith(prompt));
    const ids = (await postJson('/tokenize', { text: prompt })).json.tokens;
    const r2 = await client.completions.create({ model, prompt: ids, max_tokens: 6, ...sampled });
    assert.equal(prompt + r2.choices[0].text, r.choices[0].text);
    assert.equal(r2.usage.prompt_tokens, ids.length);
  }],
  ['errors: unknown model is 404, bad fields are 400 naming the field', async () => {
    await assert.rejects(client.chat.completions.create({ model: 'no-such-model', messages: userMsg() }),
      (e) => e.status === 404 && e.code === 'model_not_found');
    await assert.rejects(client.chat.completions.create({ model, messages: userMsg(), max_tokens: -1 }),
      (e) => e.status === 400 && e.param === 'max_tokens' && e.type === 'invalid_request_error');
    await assert.rejects(client.chat.completions.create({ model, messages: userMsg(), temperature: 'warm' }),
      (e) => e.status === 400 && e.param === 'temperature');
    await assert.rejects(client.chat.completions.create({ model, messages: [{ role: 'user', content: 5 }] }),
      (e) => e.status === 400 && e.param === 'messages[0].content');
    const bad = await postJson('/v1/chat/completions', '{"messages": [');
    assert.equal(bad.status, 400);
    assert.equal(bad.json.error.type, 'invalid_request_error');
    const none = await postJson('/v1/nothing', '{}');
    assert.equal(none.status, 404);
  }],
]);
