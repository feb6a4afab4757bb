// N concurrent SSE streams, some aborted after their first chunk: every other stream must end with
// [DONE]; afterwards /stats must show no running request and no KV page held by a request.
import { assert, base, run, randomWord } from './lib.mjs';

const total = parseInt(process.argv[3] || '200', 10);
const aborting = parseInt(process.argv[4] || '50', 10);

async function stream(i, abort) {
  const ctl = new AbortController();
  const res = await fetch(base + '/v1/chat/completions', {
    method: 'POST', headers: { 'Content-Type': 'application/json' }, signal: ctl.signal,
    body: JSON.stringify({ messages: [{ role: 'user', content: `${i} ${randomWord()}` }], max_tokens: abort ? 200 : 16,
                           ignore_eos: abort, stream: true }),
  });
  assert.equal(res.status, 200);
  const reader = res.body.getReader();
  const dec = new TextDecoder();
  let buf = '';
  for (;;) {
    let r;
    try { r = await reader.read(); } catch (e) { if (abort) return 'aborted'; throw e; }
    if (r.done) break;
    buf += dec.decode(r.value, { stream: true });
    if (abort && buf.includes('data: ')) { ctl.abort(); return 'aborted'; }
  }
  assert.ok(buf.endsWith('data: [DONE]\n\n'), `stream ${i} did not finish: ${buf.slice(-200)}`);
  return 'done';
}

await run([
  [`${total} concurrent streams, ${aborting} disconnecting early`, async () => {
    const jobs = [];
    const every = Math.max(1, Math.floor(total / aborting));
    for (let i = 0; i < total; i++) jobs.push(stream(i, i % every === 0 && i / every < aborting));
    const results = await Promise.all(jobs);
    const done = results.filter((r) => r === 'done').length;
    const aborted = results.filter((r) => r === 'aborted').length;
    assert.equal(done + aborted, total);
    assert.equal(aborted, aborting);
    console.log(JSON.stringify({ done, aborted }));
  }],
  ['afterwards nothing runs and no KV page is held by a request', async () => {
    // Cancellation takes effect at the next engine step: allow a few steps.
    let s;
    for (let i = 0; i < 200; i++) {
      s = await (await fetch(base + '/stats')).json();
      if (s.requests.running === 0 && s.requests.waiting === 0 && s.kv.pages_used === s.prefix_cache.cached_pages) break;
      await new Promise((r) => setTimeout(r, 50));
    }
    assert.equal(s.requests.running, 0);
    assert.equal(s.requests.waiting, 0);
    // pages_used counts the prefix cache's pages too; none may be held by a request.
    assert.equal(s.kv.pages_used, s.prefix_cache.cached_pages, JSON.stringify(s.kv));
    assert.ok(s.requests.cancelled >= 1, JSON.stringify(s.requests));
    console.log(JSON.stringify({ requests: s.requests, kv: s.kv, prefix_cache: s.prefix_cache }));
  }],
]);
