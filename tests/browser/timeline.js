// Drives the timeline page (/ui/) in headless Chromium for tests/tests/e2e/ui.rs, which starts
// `skiff server`, scripts the history and passes it here in the environment:
//   SKIFF_URL, SKIFF_TOKEN        the server and its admin token
//   SKIFF_CHROMIUM                the browser (Debian's /usr/bin/chromium; never downloaded)
//   REV_CREATED, REV_SCALED       when the Deployment `web` was created (replicas 1) and scaled to 3
//   SCREENSHOTS                   where each view's screenshot goes
// Exits non-zero, saying which check failed, on the first failure.
'use strict';

const path = require('node:path');
const { chromium } = require('playwright-core');

const env = (name) => {
  const value = process.env[name];
  if (!value) throw new Error(`${name} is not set`);
  return value;
};
const url = env('SKIFF_URL');
const token = env('SKIFF_TOKEN');
const created = Number(env('REV_CREATED'));
const scaled = Number(env('REV_SCALED'));
const shots = env('SCREENSHOTS');

function check(ok, what) {
  if (!ok) throw new Error(`check failed: ${what}`);
  console.log(`ok: ${what}`);
}

async function main() {
  const browser = await chromium.launch({ executablePath: env('SKIFF_CHROMIUM'), args: ['--no-sandbox', '--disable-dev-shm-usage'] });
  try {
    // The server's certificate is signed by the cluster's own CA.
    const context = await browser.newContext({ ignoreHTTPSErrors: true, viewport: { width: 1500, height: 1100 } });
    const page = await context.newPage();
    const errors = [];
    page.on('pageerror', (e) => errors.push(String(e)));
    const shot = (name) => page.screenshot({ path: path.join(shots, `${name}.png`), fullPage: true });

    // Not logged in: the login form. The token becomes a session cookie.
    await page.goto(`${url}/ui/`);
    await page.waitForSelector('#login:not([hidden])');
    await page.fill('#token', token);
    await page.click('#login-form button[type=submit]');

    // The timeline and the change list, without any click.
    await page.waitForSelector('#chart svg');
    await page.waitForSelector('#changes tbody tr');
    const bars = await page.locator('#chart svg rect[class^="bar-"]').count();
    check(bars > 0, `the chart draws bars (${bars})`);
    // A running cluster writes on its own (node status, leases, events): page back if needed.
    let rows = [];
    for (let i = 0; i < 20; i++) {
      rows = await page.$$eval('#changes tbody tr', (trs) => trs.map((tr) => tr.innerText));
      if (rows.some((r) => r.includes(`${created}`) && r.includes('default/web'))) break;
      if (await page.isHidden('#older')) break;
      const n = rows.length;
      await page.click('#older');
      await page.waitForFunction((n) => document.querySelectorAll('#changes tbody tr').length > n, n);
    }
    check(rows.some((r) => r.includes('Deployment') && r.includes('default/web') && r.includes('created')), 'the list shows web created');
    check(rows.some((r) => r.includes('ConfigMap') && r.includes('default/doomed') && r.includes('deleted')), 'the list shows doomed deleted');
    const users = await page.$$eval('#changes tbody tr', (trs) => trs
      .filter((tr) => tr.innerText.includes('Deployment') && tr.innerText.includes('created')
        && [...tr.querySelectorAll('td')].some((td) => td.textContent.trim() === 'default/web'))
      .map((tr) => tr.querySelector('td.user').textContent));
    check(users.length === 1 && users[0] === 'system:admin', `the list names who created web (${users})`);
    const revs = await page.$$eval('#changes tbody tr', (trs) => trs.map((tr) => Number(tr.dataset.revision)));
    check(revs.every((r, i) => i === 0 || revs[i - 1] >= r), 'the list is newest first');
    const markers = await page.locator('#chart svg .m-delete').count();
    check(markers > 0, 'the chart marks the delete');
    await shot('1-timeline');

    // Filtered to the one Deployment.
    await page.selectOption('#f-resource', 'deployments.apps');
    await page.fill('#f-name', 'web');
    await page.click('#filters button[type=submit]');
    await page.waitForFunction(() => {
      const trs = [...document.querySelectorAll('#changes tbody tr')];
      return trs.length > 0 && trs.every((tr) => tr.children[3].textContent === 'Deployment' && tr.children[4].textContent === 'default/web');
    }, null, { timeout: 15000 });
    const filtered = await page.$$eval('#changes tbody tr', (trs) => trs.map((tr) => Number(tr.dataset.revision)));
    check(filtered.includes(created) && filtered.includes(scaled), `the filtered list has r${created} and r${scaled}`);
    await shot('2-filtered');

    // The cluster just before the scale: web had 1 replica.
    const before = scaled - 1;
    await page.click('#tabs button[data-view=point]');
    await page.fill('#point-at', String(before));
    await page.click('#point-form button[type=submit]');
    await page.waitForSelector('.kind-table[data-kind=Deployment]');
    await page.click('.kind-table[data-kind=Deployment] a:text-is("web")');
    await page.waitForSelector('#point-yaml');
    const old = await page.textContent('#point-yaml');
    check(/"replicas": 1\b/.test(old), `web at r${before} has replicas 1`);
    const commands = await page.textContent('#point-commands');
    check(commands.includes(`--until ${before}`) && commands.includes(`resourceVersion=${before}&resourceVersionMatch=Exact`), 'copyable command lines for the point');
    await shot('3-point');

    // The scale's version against the one before it, side by side.
    await page.click(`#changes tbody tr[data-revision="${scaled}"] a.obj`);
    await page.waitForSelector(`#versions tr.selected[data-revision="${scaled}"]`);
    const removed = await page.$$eval('#object-diff td.del', (tds) => tds.map((td) => td.textContent));
    const added = await page.$$eval('#object-diff td.add', (tds) => tds.map((td) => td.textContent));
    check(removed.some((l) => /"replicas": 1\b/.test(l)) && added.some((l) => /"replicas": 3\b/.test(l)), 'the diff shows replicas 1 -> 3');
    const diffText = await page.textContent('#object-diff');
    check(!diffText.includes('managedFields"'), 'managed fields are folded away');
    await page.waitForSelector('#object-links a.owned', { timeout: 10000 });
    check((await page.textContent('#object-links')).includes('ReplicaSet'), 'web links to the ReplicaSet it owns');
    await shot('4-diff');

    // Two points compared: web changed between its creation and now.
    await page.click('#tabs button[data-view=compare]');
    await page.fill('#compare-from', String(created));
    await page.fill('#compare-to', '');
    await page.click('#compare-form button[type=submit]');
    await page.waitForSelector('#compare-list details');
    const compared = await page.textContent('#compare-list');
    check(compared.includes('changed Deployment default/web'), 'the comparison lists web as changed');
    await page.click('#compare-list details summary');
    await page.waitForSelector('#compare-list details table.diff');
    await shot('5-compare');

    // Live: a change made after the page opened shows up on its own.
    await page.click('#clear-filters');
    await page.waitForFunction(() => document.querySelectorAll('#changes tbody tr').length > 0);
    await page.check('#live');
    await page.waitForTimeout(1500);
    const status = await page.evaluate(async (bearer) => {
      const response = await fetch('/api/v1/namespaces/default/configmaps', {
        method: 'POST',
        headers: { Authorization: `Bearer ${bearer}`, 'Content-Type': 'application/json' },
        body: JSON.stringify({ apiVersion: 'v1', kind: 'ConfigMap', metadata: { name: 'live-cm' }, data: { k: 'v' } }),
      });
      return response.status;
    }, token);
    check(status === 201, `the live change was created (${status})`);
    await page.waitForSelector('#changes tbody tr:has-text("default/live-cm")', { timeout: 30000 });
    check(true, 'live mode shows the new ConfigMap');
    await shot('6-live');

    check(errors.length === 0, `no script errors on the page (${errors.join('; ')})`);
  } finally {
    await browser.close();
  }
}

main().catch((e) => {
  console.error(e && e.stack ? e.stack : e);
  process.exit(1);
});
