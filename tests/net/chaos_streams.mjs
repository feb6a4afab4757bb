// Chaos: N streams at once, half over SSE and half over WebSocket (ten generations per socket), a
// share of them ending early at a random point: SSE clients that hang up (before the headers, or
// after a random number of events), WebSocket generations cancelled by frame, and whole sockets
// dropped without a close. Every other stream must be complete and well formed; afterwards the
// engine must be idle with no KV page held by a request (pages_used == cached_pages), and after
// POST /flush_cache no page is used or cached at all. Given the server's PID, all of that runs twice
// and the server's resident memory (VmRSS in /proc/PID/status) after each flush must be within
// RSS_MARGIN_MB of what it was cold, when this script started (the server has served nothing yet).
//   node tests/net/chaos_streams.mjs http://127.0.0.1:PORT [streams=1000] [early=0.2] [server-pid]
import { readFileSync } from 'node:fs';
import { require, assert, base, run, randomWord } from './lib.mjs';

const WebSocket = require('ws');
const total = parseInt(process.argv[3] || '1000', 10);
const earlyShare = parseFloat(process.argv[4] || '0.2');
const perSocket = 10;
const serverPid = process.argv[5];
const rssMb = () => Number(/VmRSS:\s+(\d+) kB/.exec(readFileSync(`/proc/${serverPid}/status`, 'utf8'))[1]) / 1024;
const rand = (n) => Math.floor(Math.random() * n);

function body(i, early) {
  return {
    messages: [{ role: 'user', content: `${i} ${randomWord()} ${randomWord()}` }],
    // Early enders run long so that they are still running when they end; the rest finish on their own.
    max_tokens: early ? 64 : 1 + rand(24), ignore_eos: early, temperature: 1, seed: i,
  };
}

// One SSE stream; returns 'done' (checked complete and well formed) or 'early'.
async function sseStream(i, early) {
  const ctl = new AbortController();
  const stopAfter = early ? rand(12) : -1;  // events before hanging up (0: right after the headers)
  const p = fetch(base + '/v1/chat/completions', {
    method: 'POST', headers: { 'Content-Type': 'application/json' }, signal: ctl.signal,
    body: JSON.stringify({ ...body(i, early), stream: true }),
  });
  if (early && rand(5) === 0) {  // hang up before the response arrives
    ctl.abort();
    await p.catch(() => {});
    return 'early';
  }
  let res;
  try { res = await p; } catch (e) { if (early) return 'early'; throw e; }
  assert.equal(res.status, 200);
  const reader = res.body.getReader();
  const dec = new TextDecoder();
  let buf = '', events = 0;
  for (;;) {
    let r;
    try { r = await reader.read(); } catch (e) { if (early) return 'early'; throw e; }
    if (r.done) break;
    buf += dec.decode(r.value, { stream: true });
    events = buf.split('\n\n').length - 1;
    if (early && events >= stopAfter) { ctl.abort(); return 'early'; }
  }
  if (early) return 'done-anyway';  // finished before its hang-up point
  // Well formed: data lines of JSON chunks, one finish_reason per choice, then [DONE].
  assert.ok(buf.endsWith('data: [DONE]\n\n'), `stream ${i}: ${buf.slice(-200)}`);
  const evs = buf.slice(0, -2).split('\n\n');
  let finish = null;
  for (const ev of evs.slice(0, -1)) {
    assert.ok(ev.startsWith('data: ') && !ev.includes('\n'), `stream ${i}: bad event ${ev.slice(0, 100)}`);
    const c = JSON.parse(ev.slice(6));
    assert.equal(c.object, 'chat.completion.chunk');
    if (c.choices[0] && c.choices[0].finish_reason) finish = c.choices[0].finish_reason;
  }
  assert.ok(finish === 'stop' || finish === 'length', `stream ${i}: finish ${finish}`);
  return 'done';
}

// One socket with `ids` generations. drop: the socket is destroyed at a random point (every
// generation on it ends early); cancel: those ids are cancelled by frame at a random point.
function wsSocket(ids, drop, cancel) {
  return new Promise((resolve, reject) => {
    const ws = new WebSocket(base.replace('http://', 'ws://') + '/v1/ws');
    const results = {}, tokens = {}, counted = {};
    const dropAfter = rand(30);
    let frames = 0;
    const timer = setTimeout(() => reject(new Error('websocket timeout: ' + JSON.stringify(results))), 300000);
    const finish = () => { clearTimeout(timer); resolve(results); };
    ws.on('error', (e) => { if (drop) { for (const i of ids) results[i] ??= 'early'; finish(); } else reject(e); });
    ws.on('close', () => { if (drop) { for (const i of ids) results[i] ??= 'early'; finish(); } });
    ws.on('open', () => {
      if (drop && dropAfter === 0) return ws.terminate();
      for (const i of ids) {
        tokens[i] = 0;
        counted[i] = 0;
        ws.send(JSON.stringify({ type: 'generate', id: i, ...body(i, drop || cancel.has(i)) }));
      }
    });
    ws.on('message', (data) => {
      const f = JSON.parse(data.toString());
      const i = Number(f.id);
      // A cancel can cross the generation's done frame on the wire (the generation ended before the
      // server read the cancel): the server then answers that no such generation runs, as
      // docs/api.md says. Only that answer, for a generation already done, is expected.
      if (f.type === 'error' && cancel.has(i) && results[i] !== undefined &&
          f.message === 'no running generation with this id') return;
      if (f.type === 'error') return reject(new Error('error frame: ' + data));
      if (f.type === 'token') {
        if (f.token_id !== null) counted[i]++;
        tokens[i]++;
        if (cancel.has(i) && tokens[i] === 1 + (i % 7)) ws.send(JSON.stringify({ type: 'cancel', id: i }));
      }
      if (f.type === 'done') {
        const early = drop || cancel.has(i);
        if (f.finish_reason === 'cancelled') {
          assert.ok(early, `generation ${i} cancelled without being asked`);
          results[i] = 'early';
        } else {
          assert.ok(f.finish_reason === 'stop' || f.finish_reason === 'length', `generation ${i}: ${data}`);
          assert.equal(f.usage.completion_tokens, counted[i], `generation ${i}: one token frame per token`);
          results[i] = early ? 'done-anyway' : 'done';
        }
        if (!drop && Object.keys(results).length === ids.length) { ws.close(); finish(); }
      }
      if (drop && ++frames >= dropAfter) ws.terminate();
    });
  });
}

// Each round: the chaos load, the idle check, a flush. The flush gives the written KV pages and
// malloc's free lists back to the OS before it answers, so memory read after it is back near the
// cold server's. What the margin covers: what stays resident and is not cache (measured and
// explained in docs/reliability.md, "After a flush, memory").
const RSS_MARGIN_MB = 40;
const coldRss = serverPid ? rssMb() : undefined;
const rss = {};
const rounds = serverPid ? 2 : 1;
const steps = [];
for (let round = 1; round <= rounds; round++) steps.push(
  [`round ${round}: ${total} streams over SSE and WebSocket, ${Math.round(earlyShare * 100)}% ending early`, async () => {
    const sse = Math.floor(total / 2), wsCount = total - sse;
    const jobs = [];
    for (let i = 0; i < sse; i++) jobs.push(sseStream(i, Math.random() < earlyShare));
    // WebSocket: a quarter of the early enders are whole dropped sockets, the rest cancel frames.
    const wsResults = [];
    for (let s = 0; s * perSocket < wsCount; s++) {
      const ids = [];
      for (let k = 0; k < perSocket && s * perSocket + k < wsCount; k++) ids.push(sse + s * perSocket + k);
      const drop = Math.random() < earlyShare / 4;
      const cancel = new Set(drop ? [] : ids.filter(() => Math.random() < earlyShare * 0.75 / (1 - earlyShare / 4)));
      wsResults.push(wsSocket(ids, drop, cancel).then((r) => Object.values(r)));
    }
    const results = [...(await Promise.all(jobs)), ...(await Promise.all(wsResults)).flat()];
    assert.equal(results.length, total);
    const count = (k) => results.filter((r) => r === k).length;
    console.log(JSON.stringify({ done: count('done'), early: count('early'), finished_before_hanging_up: count('done-anyway') }));
  }],
  [`round ${round}: afterwards the engine is idle and no KV page is held by a request`, async () => {
    let s;
    for (let i = 0; i < 400; i++) {
      s = await (await fetch(base + '/stats')).json();
      if (s.requests.running === 0 && s.requests.waiting === 0 && s.kv.pages_used === s.prefix_cache.cached_pages) break;
      await new Promise((r) => setTimeout(r, 50));
    }
    assert.equal(s.requests.running, 0);
    assert.equal(s.requests.waiting, 0);
    assert.equal(s.kv.pages_used, s.prefix_cache.cached_pages, JSON.stringify(s.kv));
    assert.equal(s.server.active_generations, 0, JSON.stringify(s.server));
    console.log(JSON.stringify({ requests: s.requests, kv: s.kv, prefix_cache: s.prefix_cache, server: s.server }));
  }],
  [`round ${round}: after POST /flush_cache no page is used or cached` + (serverPid ? ', memory back near cold' : ''), async () => {
    const before = serverPid ? rssMb() : undefined;
    const f = await fetch(base + '/flush_cache', { method: 'POST' });
    assert.equal(f.status, 200);
    const flushed = await f.json();
    const s = await (await fetch(base + '/stats')).json();
    assert.equal(s.kv.pages_used, 0, JSON.stringify(s.kv));
    assert.equal(s.prefix_cache.cached_pages, 0, JSON.stringify(s.prefix_cache));
    rss[round] = serverPid ? rssMb() : undefined;
    console.log(JSON.stringify({ round, flushed, rss_mb: { cold: coldRss, before_flush: before, after_flush: rss[round] } }));
    if (serverPid) {
      // The flush has answered, so the release is done: nothing races this read.
      assert.ok(rss[round] <= coldRss + RSS_MARGIN_MB,
        `RSS after round ${round}'s flush ${rss[round].toFixed(1)} MB, cold ${coldRss.toFixed(1)} MB`);
    }
  }],
);
await run(steps);
