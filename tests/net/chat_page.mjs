// The chat page at GET / in headless Chromium (Debian's chromium + playwright-core): type a
// message, see the reply stream in, and check it is the text the API gives for the same request.
import { require, assert, base, run, sampled, greedyChat, randomWord } from './lib.mjs';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

const { chromium } = require('playwright-core');
const profile = mkdtempSync(join(process.env.ASTRAI_TEST_TMP || tmpdir(), 'chromium-'));
// A fresh profile directory (playwright passes it as --user-data-dir).
const browser = await chromium.launchPersistentContext(profile, {
  executablePath: '/usr/bin/chromium',
  headless: true,
  args: ['--headless', '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run',
         '--disable-background-networking', '--disable-component-update', '--disable-sync'],
});

try {
  await run([
    ['typing a message streams the reply into the page', async () => {
      const page = await browser.newPage();
      await page.goto(base + '/');
      const text = 'Hello ' + randomWord();
      await page.fill('#temperature', '0');
      await page.fill('#max_tokens', '256');
      // Count the changes made to the reply element: one mutation record per change, however the
      // browser batches the observer's callbacks and however the network split the stream (a count
      // of callbacks depended on timing: a loaded machine can deliver the whole reply in one read).
      await page.evaluate(() => {
        window.__updates = 0;
        new MutationObserver((records) => {
          for (const r of records) {
            const el = r.target.nodeType === 1 ? r.target : r.target.parentElement;
            if (el && el.closest('.assistant')) window.__updates++;
          }
        }).observe(document.getElementById('log'), { subtree: true, childList: true, characterData: true });
      });
      await page.fill('#input', text);
      await page.press('#input', 'Enter');
      await page.waitForSelector('.msg.user');
      await page.waitForSelector('.assistant[data-done="1"]', { timeout: 60000 });
      const shown = await page.textContent('.assistant');
      const ref = await greedyChat([{ role: 'user', content: text }], 256, { temperature: 0 });
      assert.equal(shown, ref.choices[0].message.content);
      const updates = await page.evaluate(() => window.__updates);
      const tokens = ref.usage.completion_tokens;
      console.log(JSON.stringify({ tokens, updates }));
      // The page shows the reply event by event: a page that waited for the end would change it once.
      if (shown.length > 0 && tokens >= 64) assert.ok(updates > 1, `streamed in ${updates} updates for ${tokens} tokens`);
      assert.equal(await page.textContent('.msg.user'), text);
    }],
  ]);
} finally {
  await browser.close();
  rmSync(profile, { recursive: true, force: true });
}
