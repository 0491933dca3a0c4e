// `make screenshots`: the dashboard's main views on the quickstart example,
// into docs/img/ (the README and docs/dashboard.md show them).
import { mkdirSync, readFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

import { Kayak, launch, waitFor } from './kayak.mjs';

const root = join(dirname(fileURLToPath(import.meta.url)), '..', '..');
const out = join(root, 'docs', 'img');
mkdirSync(out, { recursive: true });

const kayak = await new Kayak(readFileSync(join(root, 'examples', 'quickstart.yaml'), 'utf8'),
                              { server: 'checkpoint: {interval_secs: 2}\n', stateDir: true }).start();
const browser = await launch();
try {
  const page = await browser.newPage({ viewport: { width: 1280, height: 800 } });
  await page.goto(kayak.url + '/');
  // a minute of history would be nicer; 20 s gives the sparklines a shape
  await waitFor(async () => (await kayak.api('GET', '/api/v1/checkpoints')).json.regions[0].committed >= 5,
                'five checkpoints', 60000);
  await page.waitForTimeout(8000);
  const shot = async (hash, name, wait) => {
    await page.goto(kayak.url + '/' + hash);
    await page.waitForSelector(wait);
    await page.waitForTimeout(1500);
    await page.screenshot({ path: join(out, name) });
    console.log('wrote docs/img/' + name);
  };
  await shot('#/graph', 'dashboard-graph.png', 'g.node');
  await shot('#/pipeline/readings', 'dashboard-pipeline.png', '#yaml');
  await shot('#/checkpoints', 'dashboard-checkpoints.png', 'section.region tbody tr');
  await shot('#/state/totals', 'dashboard-state.png', '#browser tbody tr');
  const phone = await browser.newPage({ viewport: { width: 390, height: 844 } });
  await phone.goto(kayak.url + '/');
  await phone.waitForSelector('section.pipeline .card');
  await phone.waitForTimeout(2500);
  await phone.screenshot({ path: join(out, 'dashboard-phone.png') });
  console.log('wrote docs/img/dashboard-phone.png');
} finally {
  await browser.close();
  await kayak.stop();
}
