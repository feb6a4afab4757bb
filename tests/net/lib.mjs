// Shared helpers for the net integration scripts: packages come from tests/node/node_modules.
import { createRequire } from 'node:module';
import assert from 'node:assert/strict';

export const require = createRequire(new URL('../node/package.json', import.meta.url));
export { assert };

export const base = process.argv[2];
if (!base) {
  console.error('usage: node script.mjs http://127.0.0.1:PORT');
  process.exit(2);
}

export async function postJson(path, body, headers = {}) {
  const res = await fetch(base + path, {
    method: 'POST',
    headers: { 'Content-Type': 'application/json', ...headers },
    body: typeof body === 'string' ? body : JSON.stringify(body),
  });
  const text = await res.text();
  let json = null;
  try { json = JSON.parse(text); } catch { /* not JSON */ }
  return { status: res.status, headers: res.headers, text, json };
}

export async function getJson(path) {
  const res = await fetch(base + path);
  return { status: res.status, json: await res.json() };
}

// Runs the named checks in order; prints each and exits 1 on the first failure.
export async function run(checks) {
  for (const [name, fn] of checks) {
    try {
      await fn();
      console.log('ok   ' + name);
    } catch (e) {
      console.log('FAIL ' + name + ': ' + (e && e.stack ? e.stack : e));
      process.exit(1);
    }
  }
}

// A reproducible chat result (seeded sampling, so the text varies more than greedy output of a
// random-weight model does): the reference for streaming / stop / WebSocket checks.
export const SEED = Math.floor(Math.random() * 1e9);
export const sampled = { temperature: 1, seed: SEED };
// Seeded sampling with a seed of its own for try i: a random-weight model's outputs vary little
// with the prompt, so retries that keep one seed tend to repeat one (short) output.
export const sampledTry = (i) => ({ ...sampled, seed: SEED + 1 + i });
export async function greedyChat(messages, max_tokens, extra = {}) {
  const r = await postJson('/v1/chat/completions', { messages, max_tokens, ...sampled, ...extra });
  assert.equal(r.status, 200, r.text);
  return r.json;
}

// Code points of a string (never splits a character).
export const chars = (s) => Array.from(s);

export function randomWord(n = 6) {
  const a = 'abcdefghijklmnopqrstuvwxyz';
  let s = '';
  for (let i = 0; i < n; i++) s += a[Math.floor(Math.random() * a.length)];
  return s;
}
