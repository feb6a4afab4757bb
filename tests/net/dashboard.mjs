// /dashboard in headless Chromium while a load of streaming chats runs: the page polls /stats, draws
// every chart, shows live throughput and running requests, and loads nothing from elsewhere. A
// screenshot taken during the load goes to $ASTRAI_TEST_ARTIFACTS (default: $ASTRAI_TEST_TMP/artifacts).
import { require, assert, base, run, postJson, randomWord } from './lib.mjs';
import { mkdirSync, mkdtempSync, rmSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

const { chromium } = require('playwright-core');
const profile = mkdtempSync(join(process.env.ASTRAI_TEST_TMP || tmpdir(), 'chromium-'));
const artifacts = process.env.ASTRAI_TEST_ARTIFACTS || join(process.env.ASTRAI_TEST_TMP || tmpdir(), 'artifacts');
mkdirSync(artifacts, { recursive: true });
const browser = await chromium.launchPersistentContext(profile, {
  executablePath: '/usr/bin/chromium',
  headless: true,
  viewport: { width: 1400, height: 900 },
  args: ['--headless', '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run',
         '--disable-background-networking', '--disable-component-update', '--disable-sync'],
});

// Streams with long outputs, `streams` at a time, until stop() is called.
function load(streams) {
  let running = true;
  const one = async () => {
    while (running) {
      const r = await postJson('/v1/chat/completions', {
        messages: [{ role: 'user', content: 'Go on about ' + randomWord() }], max_tokens: 48, ignore_eos: true,
        temperature: 1, stream: true });
      assert.equal(r.status, 200, r.text);
    }
  };
  const all = Array.from({ length: streams }, one);
  return async () => { running = false; await Promise.all(all); };
}

try {
  await run([
    ['the dashboard draws live figures from /stats while a load runs', async () => {
      const page = await browser.newPage();
      const foreign = [];
      page.on('request', (req) => { if (!req.url().startsWith(base)) foreign.push(req.url()); });
      const errors = [];
      page.on('pageerror', (e) => errors.push(String(e)));
      await page.goto(base + '/dashboard?interval=200');
      const stop = load(8);
      try {
        // Running requests and generated tokens/s seen by the page itself.
        await page.waitForFunction(() => window.__samples.filter((s) => s.gen_tps > 0 && s.running > 0).length >= 15,
                                   null, { timeout: 60000 });
        const shot = join(artifacts, 'dashboard.png');
        await page.screenshot({ path: shot, fullPage: true });
        assert.ok(statSync(shot).size > 10000, 'screenshot ' + shot);
        console.log('screenshot: ' + shot);
      } finally {
        await stop();
      }
      const tps = await page.textContent('#tile-gen_tps');
      assert.notEqual(tps, '–');
      // Every chart drew something: its canvas has non-background pixels along its series.
      const inked = await page.evaluate(() => [...document.querySelectorAll('canvas')].map((c) => {
        const d = c.getContext('2d').getImageData(0, 0, c.width, c.height).data;
        let n = 0;
        for (let i = 3; i < d.length; i += 4) if (d[i] > 0) n++;
        return n;
      }));
      assert.equal(inked.length, 7);
      for (const n of inked) assert.ok(n > 100, JSON.stringify(inked));
      // The page's figures are /stats's.
      const stats = await (await fetch(base + '/stats')).json();
      const last = await page.evaluate(() => window.__samples.at(-1));
      assert.equal(last.kv_total, stats.kv.pages_total);
      assert.ok(last.gen <= stats.tokens.generated);
      assert.deepEqual(foreign, []);
      assert.deepEqual(errors, []);
      assert.equal(await page.getAttribute('#status', 'class'), '');
    }],
  ]);
} finally {
  await browser.close();
  rmSync(profile, { recursive: true, force: true });
}
