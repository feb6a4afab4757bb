// Structured output against astrai serve (the tiny random-weight model, or the trained
// models/brown; temperature 1 so the model wanders): N sampled outputs under each of 20 JSON
// schemas all parse and validate with ajv;
// json_object, guided_regex / structured_outputs.regex / choice, streaming, the 400s for bad
// schemas, and real clients with a zod schema: the openai SDK's chat.completions.parse,
// responses.parse and responses.stream (text.format on /v1/responses), and the Vercel AI SDK's
// generateObject / streamObject through @ai-sdk/openai (its default model speaks the Responses API,
// .chat() chat completions) and @ai-sdk/openai-compatible.
//   node structured_output.mjs URL [OUTPUTS_PER_SCHEMA]
import { require, assert, base, run, postJson } from './lib.mjs';

const Ajv = require('ajv');
const addFormats = require('ajv-formats');
const { OpenAI } = require('openai');
const { zodResponseFormat, zodTextFormat } = require('openai/helpers/zod');
const { z } = require('zod');
const { generateObject, streamObject } = require('ai');
const { createOpenAI } = require('@ai-sdk/openai');
const { createOpenAICompatible } = require('@ai-sdk/openai-compatible');

const perSchema = Number(process.argv[3] || 5);
const ajv = new Ajv({ strict: true, allErrors: true });
addFormats(ajv);

const str = (extra = {}) => ({ type: 'string', maxLength: 8, ...extra });
const obj = (properties, required, extra = {}) =>
  ({ type: 'object', properties, required, additionalProperties: false, ...extra });

const schemas = [
  obj({ name: str(), age: { type: 'integer', minimum: 0, maximum: 130 } }, ['name', 'age']),
  obj({ id: { type: 'integer' }, tags: { type: 'array', items: str({ maxLength: 4 }), maxItems: 3 } }, ['id']),
  obj({ color: { enum: ['red', 'green', 'blue'] }, shade: { type: 'number', minimum: 0, maximum: 1 } },
      ['color', 'shade']),
  obj({ ok: { type: 'boolean' }, note: { type: ['string', 'null'], maxLength: 6 } }, ['ok', 'note']),
  obj({ user: obj({ first: str(), last: str() }, ['first']), score: { type: 'integer', minimum: -50, maximum: 50 } },
      ['user', 'score']),
  obj({ code: { type: 'string', pattern: '^[A-Z]{3}-\\d{2,4}$' } }, ['code']),
  obj({ a: { type: 'integer' }, b: { type: 'integer' }, c: { type: 'integer' } }, []),
  { type: 'array', items: { type: 'integer', minimum: 1, maximum: 9 }, minItems: 2, maxItems: 5 },
  obj({ kind: { const: 'point' }, x: { type: 'number' }, y: { type: 'number' } }, ['kind', 'x', 'y']),
  obj({ value: { anyOf: [{ type: 'integer', minimum: 0, maximum: 9 }, str({ maxLength: 3 }), { type: 'null' }] } },
      ['value']),
  obj({ items: { type: 'array', items: obj({ sku: str({ minLength: 2, maxLength: 5 }), qty: { type: 'integer', minimum: 1, maximum: 99 } }, ['sku', 'qty']), minItems: 1, maxItems: 3 } },
      ['items']),
  obj({ level: { enum: [1, 2, 3, 'max', null] } }, ['level']),
  obj({ t: { type: 'number', exclusiveMinimum: -1, exclusiveMaximum: 1 } }, ['t']),
  obj({ day: { type: 'string', format: 'date' }, id: { type: 'string', format: 'uuid' } }, ['day', 'id']),
  {
    $defs: { leaf: obj({ v: { type: 'integer', minimum: 0, maximum: 3 } }, ['v']) },
    ...obj({ left: { $ref: '#/$defs/leaf' }, right: { $ref: '#/$defs/leaf' } }, ['left', 'right']),
  },
  obj({ word: { type: 'string', pattern: '^(yes|no|maybe)$' }, n: { type: 'integer', minimum: 100, maximum: 999 } },
      ['word', 'n']),
  obj({ matrix: { type: 'array', items: { type: 'array', items: { type: 'integer', minimum: 0, maximum: 1 }, minItems: 2, maxItems: 2 }, minItems: 2, maxItems: 2 } },
      ['matrix']),
  obj({ title: { type: 'string', minLength: 1, maxLength: 10 }, draft: { type: 'boolean' }, rev: { type: 'integer', minimum: 0 } },
      ['title', 'rev']),
  { type: 'string', maxLength: 12 },
  obj({ flag: { type: 'boolean' }, meta: obj({ k: { enum: ['a', 'b'] } }, ['k']) }, ['flag', 'meta']),
];
assert.equal(schemas.length, 20);

// What the clients' zod checks use.
const Event = z.object({ name: z.string().max(8), day: z.enum(['mon', 'tue']), count: z.number().int().min(0).max(9) });

async function sample(body, n) {
  const r = await postJson('/v1/chat/completions', {
    messages: [{ role: 'user', content: 'Answer in JSON.' }], temperature: 1, max_tokens: 600, n, ...body,
  });
  assert.equal(r.status, 200, r.text);
  return r.json.choices;
}

function fullMatch(pattern, text) {
  return new RegExp('^(?:' + pattern + ')$', 'u').test(text);
}

await run([
  [`${perSchema} outputs under each of 20 JSON schemas all parse and validate`, async () => {
    let total = 0;
    await Promise.all(schemas.map(async (schema, i) => {
      const validate = ajv.compile(schema);
      const body = { response_format: { type: 'json_schema', json_schema: { name: 's' + i, schema, strict: true } } };
      for (let left = perSchema; left > 0; left -= 16) {
        for (const c of await sample(body, Math.min(16, left))) {
          const text = c.message.content;
          assert.equal(c.finish_reason, 'stop', `schema ${i}: unfinished output ${JSON.stringify(text)}`);
          let v;
          try { v = JSON.parse(text); } catch (e) { throw new Error(`schema ${i}: not JSON: ${text}`); }
          assert.ok(validate(v), `schema ${i}: ${text} fails: ${ajv.errorsText(validate.errors)}`);
          ++total;
        }
      }
    }));
    assert.equal(total, 20 * perSchema);
  }],
  ['json_object gives a JSON object (completions too)', async () => {
    for (const c of await sample({ response_format: { type: 'json_object' }, max_tokens: 2000 }, 4)) {
      if (c.finish_reason !== 'stop') continue;  // an unbounded object may outgrow max_tokens
      const v = JSON.parse(c.message.content);
      assert.ok(v !== null && typeof v === 'object' && !Array.isArray(v), c.message.content);
    }
    const r = await postJson('/v1/completions', {
      prompt: 'x', temperature: 1, max_tokens: 200, n: 4,
      response_format: { type: 'json_schema', json_schema: { name: 'n', schema: { type: 'integer', minimum: 5, maximum: 500 } } },
    });
    assert.equal(r.status, 200, r.text);
    for (const c of r.json.choices) {
      const v = JSON.parse(c.text);
      assert.ok(Number.isInteger(v) && v >= 5 && v <= 500, c.text);
    }
  }],
  ['guided_regex, structured_outputs.regex and choice match in full', async () => {
    const pattern = '[a-c]{2,4}-(x|yy)\\d';
    for (const body of [{ guided_regex: pattern }, { structured_outputs: { regex: pattern } }])
      for (const c of await sample(body, 8)) {
        assert.equal(c.finish_reason, 'stop');
        assert.ok(fullMatch(pattern, c.message.content), c.message.content);
      }
    for (const c of await sample({ structured_outputs: { choice: ['alpha', 'beta', 'a.b'] } }, 8))
      assert.ok(['alpha', 'beta', 'a.b'].includes(c.message.content), c.message.content);
  }],
  ['streaming deltas join to a valid constrained output', async () => {
    const schema = schemas[0];
    const res = await fetch(base + '/v1/chat/completions', {
      method: 'POST', headers: { 'Content-Type': 'application/json' },
      body: JSON.stringify({ messages: [{ role: 'user', content: 'x' }], temperature: 1, max_tokens: 300, stream: true,
        response_format: { type: 'json_schema', json_schema: { name: 's', schema } } }),
    });
    const text = await res.text();
    let joined = '';
    let finish = null;
    for (const line of text.split('\n')) {
      if (!line.startsWith('data: ') || line === 'data: [DONE]') continue;
      const ev = JSON.parse(line.slice(6));
      for (const ch of ev.choices || []) {
        if (ch.delta && ch.delta.content) joined += ch.delta.content;
        if (ch.finish_reason) finish = ch.finish_reason;
      }
    }
    assert.equal(finish, 'stop');
    assert.ok(ajv.validate(schema, JSON.parse(joined)), joined);
  }],
  ['the openai SDK parses a zod schema (chat.completions.parse, responses.parse, responses.stream)', async () => {
    const client = new OpenAI({ baseURL: base + '/v1', apiKey: 'unused', maxRetries: 0 });
    const model = (await client.models.list()).data[0].id;
    const r = await client.chat.completions.parse({
      model, messages: [{ role: 'user', content: 'An event, please.' }],
      response_format: zodResponseFormat(Event, 'event'), temperature: 1, max_tokens: 300,
    });
    const parsed = r.choices[0].message.parsed;
    assert.ok(parsed, JSON.stringify(r.choices[0]));
    Event.parse(parsed);
    const params = { model, input: 'An event, please.', text: { format: zodTextFormat(Event, 'event') },
                     temperature: 1, max_output_tokens: 300 };
    const resp = await client.responses.parse(params);
    assert.equal(resp.status, 'completed', JSON.stringify(resp));
    assert.ok(resp.output_parsed, resp.output_text);
    Event.parse(resp.output_parsed);
    assert.deepEqual(JSON.parse(resp.output_text), resp.output_parsed);
    assert.equal(resp.text.format.type, 'json_schema');  // the format is echoed as sent
    assert.equal(resp.text.format.name, 'event');
    const final = await client.responses.stream(params).finalResponse();
    assert.equal(final.status, 'completed', JSON.stringify(final));
    Event.parse(final.output_parsed);
    // json_object on /v1/responses too.
    const jo = await postJson('/v1/responses', { input: 'x', text: { format: { type: 'json_object' } },
                                                 temperature: 1, max_output_tokens: 2000 });
    assert.equal(jo.status, 200, jo.text);
    if (jo.json.status === 'completed') {
      const v = JSON.parse(jo.json.output[0].content[0].text);
      assert.ok(v !== null && typeof v === 'object' && !Array.isArray(v), jo.text);
    }
  }],
  ['the Vercel AI SDK: generateObject and streamObject with a zod schema, over each request shape', async () => {
    const model = (await (await fetch(base + '/v1/models')).json()).data[0].id;
    const openai = createOpenAI({ baseURL: base + '/v1', apiKey: 'unused' });
    // Without supportsStructuredOutputs the compatible provider sends json_object and no schema.
    const compatible = createOpenAICompatible({ name: 'astrai', baseURL: base + '/v1', apiKey: 'unused',
                                                supportsStructuredOutputs: true });
    const models = { 'responses (text.format)': openai(model), 'chat (response_format)': openai.chat(model),
                     'openai-compatible (response_format)': compatible(model) };
    const common = { schema: Event, prompt: 'An event, please.', temperature: 1, maxOutputTokens: 300, maxRetries: 0 };
    for (const [shape, m] of Object.entries(models)) {
      const { object } = await generateObject({ model: m, ...common }).catch((e) => {
        throw new Error(`generateObject over ${shape}: ${e}`);
      });
      Event.parse(object);
      let error = null;
      const s = streamObject({ model: m, ...common, onError: (e) => { error = e.error; } });
      let partials = 0;
      for await (const _ of s.partialObjectStream) ++partials;
      const streamed = await s.object.catch((e) => { throw new Error(`streamObject over ${shape}: ${error || e}`); });
      Event.parse(streamed);
      assert.ok(partials > 1, `${shape}: ${partials} partial objects`);
    }
  }],
  ['a bad or unsupported schema is a 400 that names the keyword and where it is', async () => {
    const bad = async (body, param, words, path = '/v1/chat/completions') => {
      const request = path === '/v1/responses' ? { input: 'x', ...body } : { messages: [{ role: 'user', content: 'x' }], ...body };
      const r = await postJson(path, request);
      assert.equal(r.status, 400, r.text);
      assert.equal(r.json.error.param, param, r.text);
      for (const w of words) assert.ok(r.json.error.message.includes(w), r.text);
    };
    await bad({ response_format: { type: 'json_schema', json_schema: { name: 'x', schema: { type: 'object', properties: { a: { type: 'integer', multipleOf: 3 } } } } } },
      'response_format.json_schema.schema.properties.a', ["'multipleOf'", 'not supported']);
    await bad({ response_format: { type: 'yaml' } }, 'response_format.type', ["'yaml'"]);
    await bad({ response_format: { type: 'json_schema' } }, 'response_format.json_schema', ['required']);
    await bad({ guided_regex: '(a' }, 'guided_regex', ["')'"]);
    await bad({ guided_regex: 'a', response_format: { type: 'json_object' } }, 'response_format', ['only one']);
    await bad({ grammar: 'root ::= "a"' }, 'grammar', ['GBNF']);
    await bad({ text: { format: { type: 'json_schema', name: 'x', schema: { type: 'object', properties: { a: { type: 'integer', multipleOf: 3 } } } } } },
      'text.format.schema.properties.a', ["'multipleOf'", 'not supported'], '/v1/responses');
    await bad({ text: { format: { type: 'json_schema', name: 'x' } } }, 'text.format.schema', ['required'], '/v1/responses');
    await bad({ text: { format: { type: 'grammar' } } }, 'text.format.type', ["'grammar'"], '/v1/responses');
    await bad({ text: { format: 'json_object' } }, 'text.format', ['must be an object'], '/v1/responses');
  }],
]);
