// The browser side of `skiff bench timeline`: loads the timeline page (/ui/) in headless
// Chromium PAGE_LOADS times and measures, each time,
//   firstRender  from navigation to the chart and the first rows of the change list on screen;
//   filter       from submitting a filter (Deployment web-7) to its rows on screen.
// Prints one JSON object, {"firstRender": [ms...], "filter": [ms...]}, on stdout.
//   SKIFF_URL, SKIFF_TOKEN   the server and its admin token
//   SKIFF_CHROMIUM           the browser (Debian's /usr/bin/chromium; never downloaded)
//   PAGE_LOADS               how many loads to measure
'use strict';

const { chromium } = require('playwright-core');

const env = (name) => {
  const value = process.env[name];
  if (!value) throw new Error(`${name} is not set`);
  return value;
};

async function main() {
  const url = env('SKIFF_URL');
  const loads = Number(env('PAGE_LOADS'));
  const browser = await chromium.launch({ executablePath: env('SKIFF_CHROMIUM'), args: ['--no-sandbox', '--disable-dev-shm-usage'] });
  const report = { firstRender: [], filter: [] };
  try {
    const context = await browser.newContext({ ignoreHTTPSErrors: true, viewport: { width: 1500, height: 1100 } });
    // The token becomes a session cookie once; every load after that starts logged in.
    const login = await context.request.post(`${url}/ui/login`, { form: { token: env('SKIFF_TOKEN') } });
    if (!login.ok()) throw new Error(`login refused: ${login.status()}`);
    for (let i = 0; i <= loads; i++) {
      const page = await context.newPage();
      const started = Date.now();
      await page.goto(`${url}/ui/`);
      await page.waitForSelector('#chart svg', { timeout: 120000 });
      await page.waitForSelector('#changes tbody tr', { timeout: 120000 });
      const rendered = Date.now() - started;

      await page.selectOption('#f-resource', 'deployments.apps');
      await page.fill('#f-name', 'web-7');
      const answered = (action) => page.waitForResponse((r) => r.url().includes(`/debug/skiff/${action}?`) && r.url().includes('web-7'), { timeout: 120000 });
      const submitted = Date.now();
      const answers = Promise.all([answered('timeline'), answered('changes')]);
      await page.click('#filters button[type=submit]');
      await answers;
      // Drawn: the status names the newest revision again and every row is web-7's.
      await page.waitForFunction(() => {
        const trs = [...document.querySelectorAll('#changes tbody tr')];
        return document.querySelector('#status').textContent.startsWith('newest')
          && trs.every((tr) => tr.children[4].textContent.endsWith('/web-7'));
      }, null, { timeout: 120000, polling: 'raf' });
      const filtered = Date.now() - submitted;
      // The first load warms the browser's and the server's caches; it is not counted.
      if (i > 0) {
        report.firstRender.push(rendered);
        report.filter.push(filtered);
      }
      await page.close();
    }
  } finally {
    await browser.close();
  }
  console.log(JSON.stringify(report));
}

main().catch((e) => {
  console.error(e && e.stack ? e.stack : e);
  process.exit(1);
});
