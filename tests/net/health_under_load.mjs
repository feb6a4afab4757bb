// Measures /health latency while large /tokenize requests run (issue 12: CPU-heavy request work must
// not stall the network threads). A measurement, not a test: it prints figures and fails only when a
// request fails.
//   node tests/net/health_under_load.mjs http://127.0.0.1:PORT [requests=4] [megabytes=7]
import { assert, base, randomWord } from './lib.mjs';

const requests = parseInt(process.argv[3] || '4', 10);
const megabytes = parseFloat(process.argv[4] || '7');

function percentile(sorted, p) {
  return sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))];
}

function summary(ms) {
  const s = [...ms].sort((a, b) => a - b);
  const r = (x) => Math.round(x * 100) / 100;
  return { n: s.length, p50_ms: r(percentile(s, 50)), p99_ms: r(percentile(s, 99)), max_ms: r(s[s.length - 1]) };
}

async function healthOnce() {
  const t0 = performance.now();
  const res = await fetch(base + '/health');
  await res.text();
  assert.equal(res.status, 200);
  return performance.now() - t0;
}

// Words of 2-9 letters until the size is reached: real tokenizer work, not one repeated token.
const words = [];
let size = 0;
while (size < megabytes * 1e6) {
  const w = randomWord(2 + Math.floor(Math.random() * 8));
  words.push(w);
  size += w.length + 1;
}
const body = JSON.stringify({ text: words.join(' ') });

const idle = [];
for (let i = 0; i < 300; i++) idle.push(await healthOnce());

let running = requests;
const tokenizeMs = [];
const jobs = [];
for (let i = 0; i < requests; i++) {
  jobs.push((async () => {
    const t0 = performance.now();
    const res = await fetch(base + '/tokenize', { method: 'POST', headers: { 'Content-Type': 'application/json' }, body });
    const text = await res.text();
    assert.equal(res.status, 200, text.slice(0, 200));
    tokenizeMs.push(Math.round(performance.now() - t0));
    running--;
  })());
}
const loaded = [];
while (running > 0) loaded.push(await healthOnce());
await Promise.all(jobs);

console.log(JSON.stringify({
  tokenize: { requests, body_mb: Math.round(body.length / 1e4) / 100, ms: tokenizeMs },
  health_idle: summary(idle),
  health_under_load: summary(loaded),
}));
