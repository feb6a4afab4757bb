// Reasoning output through the official SDKs (openai chat + responses, @anthropic-ai/sdk) against a
// server whose model has Qwen3's tokenizer and template. A random-weight model writes think markers
// when its logits are biased towards them; the reference split is the raw text of the same sampled
// output from /v1/completions (no parsing there), cut at the markers by the documented rule, and
// its tokens (logprobs) for the usage's reasoning token count.
//   node reasoning_client.mjs URL qwen3|deepseek_r1
import { require, assert, base, run, postJson, randomWord } from './lib.mjs';

const parser = process.argv[3];
const { OpenAI } = require('openai');
const sdk = require('@anthropic-ai/sdk');
const Anthropic = sdk.Anthropic || sdk.default || sdk;
const WebSocket = require('ws');
const openai = new OpenAI({ baseURL: base + '/v1', apiKey: 'unused', maxRetries: 0 });
const anthropic = new Anthropic({ baseURL: base, apiKey: 'unused', maxRetries: 0 });
const model = (await (await fetch(base + '/v1/models')).json()).data[0].id;

async function tokenId(text) {
  const r = await postJson('/tokenize', { text, add_special_tokens: false });
  assert.equal(r.json.tokens.length, 1, text + ' is one token');
  return r.json.tokens[0];
}
const THINK = await tokenId('<think>'), END = await tokenId('</think>');
const MAX = 24;

// The rule (net/reasoning_parser.h): whitespace then <think> opens the block at the start of the
// output, or the prompt left it open; the first </think> closes it.
function startsInside(prompt) {
  const tail = prompt.trimEnd();
  return parser === 'deepseek_r1' ? !tail.endsWith('</think>') : tail.endsWith('<think>');
}
function split(text, inside) {
  const t = text.replace(/^[ \t\r\n\f\v]+/, '');
  let rest;
  if (t.startsWith('<think>')) rest = t.slice(7);
  else if (inside) rest = text;
  else return { reasoning: '', content: text };
  const at = rest.indexOf('</think>');
  return at < 0 ? { reasoning: rest, content: '' } : { reasoning: rest.slice(0, at), content: rest.slice(at + 8) };
}

// How many of the output's tokens are reasoning (usage reasoning_tokens): those wholly inside the
// block; the markers are single tokens of this tokenizer, so these are the tokens between them.
function reasoningTokens(pieces, inside) {
  let i = 0;
  while (i < pieces.length && /^[ \t\r\n\f\v]*$/.test(pieces[i])) i++;
  let from;
  if (pieces[i] === '<think>') from = i + 1;
  else if (inside) from = 0;
  else return 0;
  const end = pieces.indexOf('</think>', from);
  return (end < 0 ? pieces.length : end) - from;
}

// The raw sampled output for messages (+ template kwargs), its reference split and reasoning tokens.
async function reference(messages, sampling, kwargs) {
  const t = await postJson('/apply-template', { messages, add_generation_prompt: true, chat_template_kwargs: kwargs });
  assert.equal(t.status, 200, t.text);
  const c = await postJson('/v1/completions', { prompt: t.json.text, max_tokens: MAX, logprobs: 0, ...sampling });
  assert.equal(c.status, 200, c.text);
  const raw = c.json.choices[0].text;
  const inside = startsInside(t.json.text);
  return { raw, prompt: t.json.text, ...split(raw, inside),
           reasoningTokens: reasoningTokens(c.json.choices[0].logprobs.tokens, inside) };
}

// A seeded, biased request whose output has both reasoning and an answer (tries seeds in order).
let found = null;
async function mixed() {
  if (found) return found;
  const messages = [{ role: 'user', content: 'Think about ' + randomWord() }];
  const base_seed = Math.floor(Math.random() * 1e6);
  for (let i = 0; i < 40; i++) {
    const sampling = { temperature: 1, seed: base_seed + i, logit_bias: { [THINK]: 13, [END]: 11 } };
    const ref = await reference(messages, sampling);
    if (ref.reasoning && ref.content) return (found = { messages, sampling, ref });
  }
  throw new Error('no seed gave both reasoning and an answer');
}

const join = (xs) => xs.join('');

await run([
  ['chat.completions: reasoning_content and content are the raw output split at the markers', async () => {
    const { messages, sampling, ref } = await mixed();
    const r = await openai.chat.completions.create({ model, messages, max_tokens: MAX, ...sampling });
    const m = r.choices[0].message;
    assert.equal(m.reasoning_content, ref.reasoning, 'raw: ' + JSON.stringify(ref.raw));
    assert.equal(m.content, ref.content);
    assert.ok(ref.reasoningTokens > 0);
    assert.deepEqual(r.usage.completion_tokens_details, { reasoning_tokens: ref.reasoningTokens });
  }],
  ['chat.completions streaming: reasoning deltas come first, then content, same texts', async () => {
    const { messages, sampling, ref } = await mixed();
    const stream = await openai.chat.completions.create({ model, messages, max_tokens: MAX, ...sampling, stream: true,
                                                          stream_options: { include_usage: true } });
    const reasoning = [], content = [];
    let usage = null;
    for await (const chunk of stream) {
      if (chunk.usage) usage = chunk.usage;
      const d = chunk.choices[0]?.delta;
      if (!d) continue;
      if (d.reasoning_content) {
        assert.equal(join(content), '', 'reasoning after content');
        reasoning.push(d.reasoning_content);
      }
      if (d.content) content.push(d.content);
    }
    assert.ok(reasoning.length >= 1);
    assert.equal(join(reasoning), ref.reasoning);
    assert.equal(join(content), ref.content);
    assert.deepEqual(usage.completion_tokens_details, { reasoning_tokens: ref.reasoningTokens });
  }],
  ['enable_thinking false: the prompt closes the block and the output is all content', async () => {
    const messages = [{ role: 'user', content: 'Answer about ' + randomWord() }];
    const kwargs = { enable_thinking: false };
    // Sampled at temperature 1 over this unbiased random model's flat 151k distribution, where any
    // last-bit difference in the logits changes the draw: the reference request runs first and
    // caches the prompt, so the chat request is a prefix-cache hit that computes only the prompt's
    // tail. Equal outputs rest on the CPU forward being batch-invariant (docs/architecture.md,
    // "Sampling"); before it was, this case diverged mid-sequence in 4 of 10 loaded runs.
    const sampling = { temperature: 1, seed: 11 };
    const ref = await reference(messages, sampling, kwargs);
    assert.ok(ref.prompt.endsWith('<think>\n\n</think>\n\n'), JSON.stringify(ref.prompt));
    const r = await openai.chat.completions.create({ model, messages, max_tokens: MAX, ...sampling,
                                                     chat_template_kwargs: kwargs });
    assert.equal(r.choices[0].message.content, ref.content);
    assert.equal(r.choices[0].message.reasoning_content ?? '', ref.reasoning);
    assert.equal(ref.content, ref.raw);  // no open block, no <think> from this unbiased model
    assert.deepEqual(r.usage.completion_tokens_details, { reasoning_tokens: 0 });
  }],
  ['Anthropic messages: a thinking block, then the text block', async () => {
    const { messages, sampling, ref } = await mixed();
    const m = await anthropic.messages.create({ model, messages, max_tokens: MAX, ...sampling });
    assert.deepEqual(m.content.map((b) => b.type), ['thinking', 'text']);
    assert.equal(m.content[0].thinking, ref.reasoning);
    assert.equal(m.content[1].text, ref.content);
  }],
  ['Anthropic streaming: thinking_delta events in block 0, text_delta in block 1', async () => {
    const { messages, sampling, ref } = await mixed();
    const stream = anthropic.messages.stream({ model, messages, max_tokens: MAX, ...sampling });
    const thinking = [], text = [], starts = [];
    for await (const ev of stream) {
      if (ev.type === 'content_block_start') starts.push([ev.index, ev.content_block.type]);
      if (ev.type === 'content_block_delta' && ev.delta.type === 'thinking_delta') {
        assert.equal(ev.index, 0);
        thinking.push(ev.delta.thinking);
      }
      if (ev.type === 'content_block_delta' && ev.delta.type === 'text_delta') {
        assert.equal(ev.index, 1);
        text.push(ev.delta.text);
      }
    }
    assert.deepEqual(starts, [[0, 'thinking'], [1, 'text']]);
    assert.equal(join(thinking), ref.reasoning);
    assert.equal(join(text), ref.content);
    const final = await stream.finalMessage();
    assert.equal(final.content[0].thinking, ref.reasoning);
    assert.equal(final.content[1].text, ref.content);
  }],
  ['responses: a reasoning item, then the message; streamed the same way', async () => {
    const { messages, sampling, ref } = await mixed();
    const r = await openai.responses.create({ model, input: messages, max_output_tokens: MAX, ...sampling });
    assert.deepEqual(r.output.map((o) => o.type), ['reasoning', 'message']);
    assert.equal(r.output[0].content[0].type, 'reasoning_text');
    assert.equal(r.output[0].content[0].text, ref.reasoning);
    assert.equal(r.output_text, ref.content);
    assert.equal(r.usage.output_tokens_details.reasoning_tokens, ref.reasoningTokens);
    const stream = openai.responses.stream({ model, input: messages, max_output_tokens: MAX, ...sampling });
    const reasoning = [], text = [];
    for await (const ev of stream) {
      if (ev.type === 'response.reasoning_text.delta') {
        assert.equal(join(text), '');
        reasoning.push(ev.delta);
      }
      if (ev.type === 'response.output_text.delta') text.push(ev.delta);
    }
    assert.equal(join(reasoning), ref.reasoning);
    assert.equal(join(text), ref.content);
    const final = await stream.finalResponse();
    assert.equal(final.output[0].content[0].text, ref.reasoning);
    assert.equal(final.output_text, ref.content);
    assert.equal(final.usage.output_tokens_details.reasoning_tokens, ref.reasoningTokens);
  }],
  ['WebSocket generate frames take chat_template_kwargs', async () => {
    const messages = [{ role: 'user', content: 'Hello ' + randomWord() }];
    const kwargs = { enable_thinking: false };
    const http = await openai.chat.completions.create({ model, messages, max_tokens: 1, chat_template_kwargs: kwargs });
    const plain = await openai.chat.completions.create({ model, messages, max_tokens: 1 });
    assert.notEqual(http.usage.prompt_tokens, plain.usage.prompt_tokens);
    const ws = new WebSocket(base.replace('http://', 'ws://') + '/v1/ws');
    await new Promise((resolve, reject) => { ws.once('open', resolve); ws.once('error', reject); });
    const done = new Promise((resolve, reject) => {
      ws.on('message', (data) => {
        const f = JSON.parse(data.toString());
        if (f.type === 'error') reject(new Error(data.toString()));
        if (f.type === 'done') resolve(f);
      });
    });
    ws.send(JSON.stringify({ type: 'generate', id: 'k', messages, max_tokens: 1, chat_template_kwargs: kwargs }));
    const f = await done;
    ws.close();
    assert.equal(f.usage.prompt_tokens, http.usage.prompt_tokens);
  }],
]);
