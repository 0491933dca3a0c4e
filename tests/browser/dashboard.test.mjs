// The dashboard in a real browser (Debian's chromium, headless): the graph,
// live cards, a failing output, the editor's located errors, apply, revert,
// delete, the token prompt, the phone-width layout and the page's weight.
// Run by CTest (label browser): node --test tests/browser/
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';

import { Kayak, launch, waitFor } from './kayak.mjs';

const GRAPH = `
buckets:
  totals: {}
pipelines:
  src:
    input: {dummy: {rate_per_sec: 40, template: '{"k":"k{{seq}}","v":1}'}}
    transforms:
      - bucket: {name: totals, key: k, op: add, field: v}
    outputs: [{file: {path: out}}]
  alerts:
    input: {pipeline: src}
    transforms:
      - filter: 'v > 1'
    outputs: [{file: {path: alerts}}]
  failing:
    input: {dummy: {rate_per_sec: 20}}
    outputs:
      - http: {url: 'http://127.0.0.1:9/refused', retry: {base_ms: 20, max_ms: 50}}
  win:
    input: {dummy: {rate_per_sec: 20, template: '{"k":"a","v":1,"seq":{{seq}}}'}}
    transforms:
      - rolling_window: {key: k, field: v, window_messages: 100, aggregates: [count]}
      - map: {w: '100 / (seq % 4 - 1)'}
    outputs: [{file: {path: win}}]
    dead_letter: {file: {path: dead}}
  reader:
    input: {dummy: {rate_per_sec: 5, template: '{"k":"k1"}'}}
    transforms:
      - lookup: {bucket: totals, key: k, as: total}
    outputs: [{file: {path: looked}}]
`;

// The numbers a node or a card shows, read from the page.
const nodeState = (page, id) =>
  page.getAttribute(`g.node[data-id="${id}"]`, 'data-state').catch(() => null);
const cardNumber = (page, pipeline, card, what) =>
  page.getAttribute(`section.pipeline[data-id="${pipeline}"] .card[data-name="${card}"]`, `data-${what}`)
    .then(Number).catch(() => -1);

describe('the dashboard against a running graph', () => {
  let kayak, browser, page;
  const requests = [];

  before(async () => {
    kayak = await new Kayak(GRAPH, { server: 'checkpoint: {interval_secs: 1}\nstop_timeout_secs: 5\n' +
                                             'memory_limit_bytes: 268435456\n',
                                     stateDir: true }).start();
    browser = await launch();
    page = await browser.newPage({ viewport: { width: 1280, height: 800 } });
    page.on('request', r => requests.push({ at: Date.now(), url: r.url() }));
    await page.goto(kayak.url + '/');
  });
  after(async () => {
    await browser?.close();
    await kayak?.stop();
  });

  test('the graph shows every pipeline and bucket with their edges', async () => {
    for (const id of ['p:src', 'p:alerts', 'p:failing', 'p:reader', 'b:totals']) {
      await page.waitForSelector(`g.node[data-id="${id}"]`, { timeout: 10000 });
    }
    const edges = await page.$$eval('path.edge', es => es.map(e => `${e.dataset.from}>${e.dataset.to}`).sort());
    assert.deepEqual(edges, ['b:totals>p:reader', 'p:src>b:totals', 'p:src>p:alerts']);
    // inputs on the left: src before alerts and before the bucket it writes
    const x = async id => (await page.locator(`g.node[data-id="${id}"]`).boundingBox()).x;
    assert.ok(await x('p:src') < await x('p:alerts'));
    assert.ok(await x('p:src') < await x('b:totals'));
    assert.match(await page.textContent('g.node[data-id="b:totals"]'), /totals.*\d+ entr/);
  });

  test("a card's count rises as messages flow", async () => {
    const first = await waitFor(async () => {
      const n = await cardNumber(page, 'src', 'input', 'out');
      return n > 0 && n;
    }, 'a count on the input card');
    await waitFor(async () => (await cardNumber(page, 'src', 'input', 'out')) > first, 'the count to rise');
    assert.match(await page.textContent('g.node[data-id="p:src"] .sub'), /msg\/s/);
  });

  test('a failing output turns its node red and its error count climbs', async () => {
    await waitFor(async () => ['retrying', 'failed'].includes(await nodeState(page, 'p:failing')), 'failing to fail');
    const stroke = await page.$eval('g.node[data-id="p:failing"] rect', r => getComputedStyle(r).stroke);
    const [r, g, b] = stroke.match(/\d+/g).map(Number);
    assert.ok(r > 120 && g < 80 && b < 80, `the node's outline is red, not ${stroke}`);
    const errors = await waitFor(async () => {
      const n = await cardNumber(page, 'failing', 'outputs[0]', 'errors');
      return n > 0 && n;
    }, 'errors on the output card');
    await waitFor(async () => (await cardNumber(page, 'failing', 'outputs[0]', 'errors')) > errors, 'the errors to climb');
    assert.match(await page.textContent('section.pipeline[data-id="failing"] .card[data-name="outputs[0]"] .last-error'),
                 /127\.0\.0\.1:9/);
  });

  test('the page polls at most once a second', async () => {
    const from = Date.now();
    await page.waitForTimeout(5000);
    const polls = requests.filter(r => r.at >= from && r.url.includes('/api/'));
    assert.ok(polls.length >= 3 && polls.length <= 6, `${polls.length} API requests in 5 s`);
    assert.ok(polls.every(r => r.url.endsWith('/api/v1/overview')));
  });

  test('the checkpoints view shows the history', async () => {
    await page.click('header nav a[data-view="checkpoints"]');
    const region = page.locator('section.region', { hasText: 'pipelines: src' });
    const rows = await waitFor(async () => {
      const n = await region.locator('tbody tr').count();
      return n >= 2 && n;
    }, 'two checkpoints in the history');
    assert.ok(rows <= 50);
    assert.match(await region.locator('tbody tr').first().textContent(), /#\d+\s*committed/);
    assert.match(await region.locator('.summary').textContent(), /last committed\s*#\d+/);
    assert.match(await region.locator('.summary').textContent(),
                 /a kill now replays\s*at most [\d,]+ messages/);
    // the region whose output fails commits nothing, and the page says why it is not ready
    assert.match(await page.textContent('#reasons'), /failing/);
  });

  test('the bucket browser pages and finds a key', async () => {
    await page.click('header nav a[data-view="state"]');
    await page.click('tr[data-bucket="totals"] a');
    await page.waitForSelector('#browser tbody tr');
    assert.match(await page.textContent('#browser .note'), /showing 50/);
    const firstPage = await page.textContent('#browser tbody tr td');
    await page.click('#browser button:has-text("Next page")');
    await waitFor(async () => /after /.test(await page.textContent('#browser .note')), 'the next page');
    assert.ok((await page.textContent('#browser tbody tr td')) > firstPage);
    await page.fill('#key', 'k1');
    await page.click('#browser button[type="submit"]');
    await waitFor(async () => /one entry/.test(await page.textContent('#browser .note')), 'the entry');
    assert.equal(await page.textContent('#browser tbody tr td'), 'k1');
    await page.fill('#key', 'nothing-here');
    await page.click('#browser button[type="submit"]');
    await waitFor(async () => /no entry for nothing-here/.test(await page.textContent('#browser .note')), 'no entry');
  });

  test('a bad edit shows the located error in the editor', async () => {
    await page.goto(kayak.url + '/#/pipeline/reader');
    await waitFor(async () => (await page.inputValue('#yaml')).includes('lookup'), 'the YAML');
    const good = await page.inputValue('#yaml');
    const lines = good.split('\n');
    const at = lines.findIndex(l => l.includes('lookup'));
    lines[at] = lines[at].replace('lookup:', 'lookup_typo:');
    await page.fill('#yaml', lines.join('\n'));
    await page.click('#apply');
    await page.waitForSelector('#problems li');
    assert.match(await page.textContent('#problems li'), new RegExp(`line ${at + 1}:`));
    assert.match(await page.textContent('#problems li'), /lookup_typo/);
    assert.equal(await page.getAttribute('#yaml', 'aria-invalid'), 'true');
    assert.equal(await page.textContent('.gutter .bad'), String(at + 1));
    // the caret is on the line
    const selected = await page.$eval('#yaml', t => t.value.slice(t.selectionStart, t.selectionEnd));
    assert.match(selected, /lookup_typo/);
    assert.equal((await kayak.api('GET', '/api/v1/pipelines/reader')).json.version, 1);
  });

  test('an edit that works changes the version; revert goes back; delete removes it', async () => {
    const yaml = (await page.inputValue('#yaml')).replace('lookup_typo:', 'lookup:').replace('rate_per_sec: 5', 'rate_per_sec: 7');
    await page.fill('#yaml', yaml);
    await page.click('#apply');
    await waitFor(async () => /applied: version 2/.test(await page.textContent('#note')), 'version 2', 30000);
    let r = await kayak.api('GET', '/api/v1/pipelines/reader');
    assert.equal(r.json.version, 2);
    assert.equal(r.json.config.input.dummy.rate_per_sec, 7);
    assert.match(await page.textContent('#version option:checked'), /version 2 .*running/);

    await page.click('#revert');
    await waitFor(async () => /reverted: version 3/.test(await page.textContent('#note')), 'the revert', 30000);
    r = await kayak.api('GET', '/api/v1/pipelines/reader');
    assert.equal(r.json.version, 3);
    assert.equal(r.json.config.input.dummy.rate_per_sec, 5);
    assert.match(await page.inputValue('#yaml'), /rate_per_sec: 5/);

    await page.click('#delete');
    assert.equal(await page.textContent('#delete'), 'Confirm delete');
    assert.equal((await kayak.api('GET', '/api/v1/pipelines/reader')).status, 200);  // not before the second press
    await page.click('#delete');
    await waitFor(async () => new URL(page.url()).hash === '#/graph', 'the graph after the delete', 30000);
    assert.equal((await kayak.api('GET', '/api/v1/pipelines/reader')).status, 404);
    await waitFor(async () => (await page.$('g.node[data-id="p:reader"]')) === null, 'the node to go');
  });

  test("a transform's card counts what went to the dead letters", async () => {
    await page.goto(kayak.url + '/#/pipeline/win');
    const card = 'section.pipeline[data-id="win"] .card[data-name="transforms[1]"]';
    await waitFor(async () => Number(await page.getAttribute(card, 'data-dead-letters').catch(() => 0)) >= 2,
                  'dead letters on the card');
    assert.match(await page.textContent(card), /dead letters\s*\d+/);
    const api = (await kayak.api('GET', '/api/v1/pipelines/win')).json;
    assert.ok(api.components.find(c => c.name === 'dead_letter').messages_out >= 1);
  });

  test('the header shows the memory budget and a card what its component holds', async () => {
    await page.goto(kayak.url + '/#/pipeline/win');
    const card = 'section.pipeline[data-id="win"] .card[data-name="transforms[0]"]';
    await waitFor(async () => Number(await page.getAttribute(card, 'data-memory').catch(() => 0)) > 0,
                  'the window\'s memory on its card');
    assert.match(await page.textContent(card), /memory\s*[\d.]+ (B|KiB|MiB)/);
    await waitFor(async () => Number(await page.getAttribute('#memory', 'data-used').catch(() => 0)) > 0,
                  'the memory in the header');
    assert.equal(await page.getAttribute('#memory', 'data-limit'), '268435456');
    assert.match(await page.textContent('#memory'), /^memory [\d.]+ (B|KiB|MiB) of 256\.0 MiB$/);
    assert.match(await page.getAttribute('#memory', 'title'), /win transforms\[0\] \(state\)/);
    const api = (await kayak.api('GET', '/api/v1/overview')).json.memory;
    assert.equal(api.limit_bytes, 268435456);
    assert.equal(api.exceeded, false);
  });

  test('Plan shows what a change drops; Apply asks once more before it drops it', async () => {
    await waitFor(async () => ((await kayak.api('GET', '/api/v1/checkpoints')).json.regions || [])
      .some(r => r.region === 'win' && r.last_committed_id > 0), 'a checkpoint of region win');
    await page.goto(kayak.url + '/#/pipeline/win');
    await waitFor(async () => (await page.inputValue('#yaml')).includes('window_messages: 100'), 'the YAML');
    await page.fill('#yaml', (await page.inputValue('#yaml')).replace('window_messages: 100', 'window_messages: 50'));
    await page.click('#plan-change');
    const lost = '#plan li.loses[data-component="pipeline win transforms[0] (rolling_window)"]';
    await page.waitForSelector(lost);
    assert.match(await page.textContent(lost), /starts empty .*'window_messages' changed/);
    assert.match(await page.textContent('#note'), /drops the committed state of 1 component/);
    assert.match(await page.textContent('#plan li[data-component="pipeline win input (dummy)"]'), /kept/);
    assert.equal((await kayak.api('GET', '/api/v1/pipelines/win')).json.version, 1, 'a plan changes nothing');

    await page.click('#apply');
    await waitFor(async () => (await page.textContent('#apply')) === 'Apply and lose state', 'the second step');
    assert.equal((await kayak.api('GET', '/api/v1/pipelines/win')).json.version, 1, 'refused without consent');
    await page.click('#apply');
    await waitFor(async () => /applied: version 2/.test(await page.textContent('#note')), 'version 2', 30000);
    assert.equal((await kayak.api('GET', '/api/v1/pipelines/win')).json.config.transforms[0].rolling_window.window_messages, 50);
    assert.equal(await page.textContent('#apply'), 'Apply');

    // A tuning change keeps the state: Apply makes it at once.
    await page.fill('#yaml', (await page.inputValue('#yaml')).replace('rate_per_sec: 20', 'rate_per_sec: 25'));
    await page.click('#plan-change');
    await waitFor(async () => /keeps all committed state/.test(await page.textContent('#note')), 'the plan');
    assert.equal(await page.$('#plan li.loses'), null);
    await page.click('#apply');
    await waitFor(async () => /applied: version 3/.test(await page.textContent('#note')), 'version 3', 30000);
  });

  test('a refused delete says why', async () => {
    await page.goto(kayak.url + '/#/pipeline/src');
    await page.click('#delete');
    await page.click('#delete');
    await waitFor(async () => /read by alerts/.test(await page.textContent('#note')), 'the 409');
    assert.equal((await kayak.api('GET', '/api/v1/pipelines/src')).status, 200);
  });

  test('a node is reached and opened with the keyboard', async () => {
    await page.goto(kayak.url + '/#/graph');
    await page.waitForSelector('g.node[data-id="p:src"]');
    await page.focus('g.node[data-id="p:src"]');
    await page.keyboard.press('Enter');
    await waitFor(async () => new URL(page.url()).hash === '#/pipeline/src', 'the pipeline view');
  });

  test('at phone width nothing is wider than the screen', async () => {
    const phone = await browser.newPage({ viewport: { width: 390, height: 844 } });
    await phone.goto(kayak.url + '/');
    await phone.waitForSelector('section.pipeline .card');
    const width = await phone.evaluate(() => document.documentElement.scrollWidth);
    assert.ok(width <= 390, `the page is ${width} px wide`);
    await phone.close();
  });

  test('the page and its files stay under 150 KB and come from kayak only', async () => {
    let total = 0;
    for (const path of ['/', '/ui/app.js', '/ui/style.css']) {
      const r = await kayak.api('GET', path);
      assert.equal(r.status, 200, path);
      total += Buffer.byteLength(r.text);
    }
    assert.ok(total < 150 * 1024, `${total} bytes`);
    const others = requests.filter(r => !r.url.startsWith(kayak.url) && !r.url.startsWith('data:'));
    assert.deepEqual(others, []);
    const head = await fetch(kayak.url + '/');
    assert.match(head.headers.get('content-security-policy'), /script-src 'self'(;|$)/);
    assert.equal(head.headers.get('x-content-type-options'), 'nosniff');
  });
});

describe('the dashboard with a token', () => {
  let kayak, browser;

  before(async () => {
    kayak = await new Kayak(`
pipelines:
  p:
    input: {dummy: {rate_per_sec: 10}}
    outputs: [{file: {path: out}}]
`, { server: 'auth: {token_file: token}\n', files: { token: 's3cret-token\n' } }).start();
    browser = await launch();
  });
  after(async () => {
    await browser?.close();
    await kayak?.stop();
  });

  test('the page is refused until the token is given', async () => {
    const page = await browser.newPage();
    await page.goto(kayak.url + '/');
    await page.waitForSelector('#login:not([hidden])');
    assert.equal(await page.$('g.node'), null);
    assert.equal(await page.isHidden('#main'), true);

    await page.fill('#token', 'wrong');
    await page.click('#login button');
    await waitFor(async () => /refused/.test(await page.textContent('#login-error')), 'the refusal');
    assert.equal(await page.$('g.node'), null);

    await page.fill('#token', 's3cret-token');
    await page.click('#login button');
    await page.waitForSelector('g.node[data-id="p:p"]');
    assert.equal(await page.isHidden('#login'), true);
    // the token stays in the tab: a reload goes straight in
    await page.reload();
    await page.waitForSelector('g.node[data-id="p:p"]');
    await page.close();
  });
});
