// /v1/ws with the `ws` package: three generations multiplexed on one socket, one of them cancelled;
// a garbage text frame gets an error frame and the socket keeps working.
import { require, assert, base, run, sampled, greedyChat, randomWord, getJson } from './lib.mjs';

const WebSocket = require('ws');
const wsUrl = base.replace('http://', 'ws://') + '/v1/ws';

function open() {
  return new Promise((resolve, reject) => {
    const ws = new WebSocket(wsUrl);
    ws.once('open', () => resolve(ws));
    ws.once('error', reject);
  });
}

await run([
  ['three generations on one socket, one cancelled', async () => {
    const prompts = { a: randomWord(), b: randomWord(), c: randomWord() };
    const msgs = (id) => [{ role: 'user', content: 'Talk about ' + prompts[id] }];
    const ref = { a: await greedyChat(msgs('a'), 12), c: await greedyChat(msgs('c'), 12) };
    const ws = await open();
    const got = { a: '', b: '', c: '' }, tokens = { a: 0, b: 0, c: 0 }, done = {};
    let cancelled = false;
    const finished = new Promise((resolve, reject) => {
      const timer = setTimeout(() => reject(new Error('timeout: ' + JSON.stringify(done))), 60000);
      ws.on('message', (data, isBinary) => {
        assert.equal(isBinary, false);
        const f = JSON.parse(data.toString());
        if (f.type === 'error') return reject(new Error('error frame: ' + data));
        if (f.type === 'token') {
          got[f.id] += f.text;
          if (f.token_id !== null) tokens[f.id]++;  // null: text flushed at the end
          if (f.id === 'b' && !cancelled) {
            cancelled = true;
            ws.send(JSON.stringify({ type: 'cancel', id: 'b' }));
          }
        }
        if (f.type === 'done') {
          done[f.id] = f;
          if (Object.keys(done).length === 3) { clearTimeout(timer); resolve(); }
        }
      });
    });
    ws.send(JSON.stringify({ type: 'generate', id: 'a', messages: msgs('a'), max_tokens: 12, ...sampled }));
    ws.send(JSON.stringify({ type: 'generate', id: 'b', messages: msgs('b'), max_tokens: 400, ...sampled, ignore_eos: true }));
    ws.send(JSON.stringify({ type: 'generate', id: 'c', messages: msgs('c'), max_tokens: 12, ...sampled }));
    await finished;
    for (const id of ['a', 'c']) {
      assert.equal(got[id], ref[id].choices[0].message.content, 'text of ' + id);
      assert.equal(done[id].finish_reason, ref[id].choices[0].finish_reason);
      assert.equal(done[id].usage.completion_tokens, ref[id].usage.completion_tokens);
      assert.equal(tokens[id], ref[id].usage.completion_tokens, 'one token frame per token');
    }
    assert.equal(done.b.finish_reason, 'cancelled');
    assert.ok(done.b.usage.completion_tokens < 400);
    ws.close();
  }],
  ['a garbage text frame gets an error frame and the socket keeps serving', async () => {
    const ws = await open();
    const frames = [];
    const next = () => new Promise((resolve) => ws.once('message', (d) => resolve(JSON.parse(d.toString()))));
    let p = next();
    ws.send('{"type": "generate", "id": ');
    frames.push(await p);
    assert.equal(frames[0].type, 'error');
    p = next();
    ws.send(JSON.stringify({ type: 'cancel', id: 'nothing-running' }));
    assert.equal((await p).type, 'error');
    const doneP = new Promise((resolve) => ws.on('message', (d) => { const f = JSON.parse(d.toString()); if (f.type === 'done') resolve(f); }));
    ws.send(JSON.stringify({ type: 'generate', id: 1, messages: [{ role: 'user', content: 'hi' }], max_tokens: 3 }));
    const f = await doneP;
    assert.equal(f.id, '1');
    ws.close();
  }],
  ['closing the socket mid-generation cancels it and leaves no active generation', async () => {
    const before = (await getJson('/stats')).json.server.client_disconnects;
    const ws = await open();
    await new Promise((resolve) => {
      ws.on('message', (d) => { if (JSON.parse(d.toString()).type === 'token') resolve(); });
      ws.send(JSON.stringify({ type: 'generate', id: 'long', messages: [{ role: 'user', content: 'go' }],
        max_tokens: 3000, ignore_eos: true, ...sampled }));
    });
    ws.terminate();  // no close handshake: the server finds out from the socket
    let s;
    for (let i = 0; i < 200; i++) {
      s = (await getJson('/stats')).json;
      if (s.requests.running === 0 && s.server.active_generations === 0) break;
      await new Promise((r) => setTimeout(r, 50));
    }
    assert.equal(s.requests.running, 0, JSON.stringify(s.requests));
    assert.equal(s.server.active_generations, 0, JSON.stringify(s.server));
    assert.equal(s.server.client_disconnects, before + 1, JSON.stringify(s.server));
  }],
  ['a binary frame closes the socket with 1003', async () => {
    const ws = await open();
    const code = await new Promise((resolve) => { ws.on('close', (c) => resolve(c)); ws.send(Buffer.from([1, 2, 3]), { binary: true }); });
    assert.equal(code, 1003);
  }],
]);
