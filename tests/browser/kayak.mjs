// What the browser tests share: a kayak server on a config (started like the
// e2e harness does, on a free loopback port), Debian's chromium driven by
// playwright-core (pinned in tests/servers/npm), and a poll with a deadline.
import { spawn } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

const here = dirname(fileURLToPath(import.meta.url));
const require = createRequire(join(here, '..', 'servers', 'npm', 'package.json'));
export const { chromium } = require('playwright-core');

export const KAYAK = process.env.KAYAK_BIN || join(here, '..', '..', 'build', 'kayak');
export const CHROMIUM = process.env.KAYAK_CHROMIUM || '/usr/bin/chromium';

export async function launch() {
  // --no-sandbox: CI runs as root, where chromium's sandbox cannot start.
  return chromium.launch({ executablePath: CHROMIUM, args: ['--no-sandbox'] });
}

// Polls `cond` (async or not) until it returns something truthy, for at
// most `ms`; throws with `what` otherwise.
export async function waitFor(cond, what, ms = 20000) {
  const deadline = Date.now() + ms;
  let last;
  for (;;) {
    try { last = await cond(); } catch (e) { last = e; }
    if (last && !(last instanceof Error)) return last;
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}: ${last}`);
    await new Promise(r => setTimeout(r, 100));
  }
}

export class Kayak {
  // `config`: the pipelines file; `server`: extra server config lines.
  constructor(config, { server = '', stateDir = false, files = {} } = {}) {
    this.dir = mkdtempSync(join(tmpdir(), 'kayak-browser-'));
    for (const [name, text] of Object.entries(files)) writeFileSync(join(this.dir, name), text, { mode: 0o600 });
    writeFileSync(join(this.dir, 'pipelines.yaml'), config);
    writeFileSync(join(this.dir, 'server.yaml'), 'listen: 127.0.0.1:0\n' + server);
    const args = ['--config', 'pipelines.yaml', '--server-config', 'server.yaml'];
    if (stateDir) args.push('--state-dir', 'state');
    this.stderr = '';
    this.proc = spawn(KAYAK, args, { cwd: this.dir, stdio: ['ignore', 'ignore', 'pipe'] });
    this.proc.stderr.on('data', d => { this.stderr += d; });
  }

  async start() {
    this.url = await waitFor(() => {
      if (this.proc.exitCode !== null) throw new Error('kayak exited:\n' + this.stderr);
      const m = /API listening on (http:\/\/127\.0\.0\.1:\d+)/.exec(this.stderr);
      return m && m[1];
    }, 'the API address in the log');
    return this;
  }

  async api(method, path, body, token) {
    const headers = token ? { Authorization: 'Bearer ' + token } : {};
    const res = await fetch(this.url + path, { method, body, headers });
    const text = await res.text();
    let json = null;
    try { json = JSON.parse(text); } catch { json = null; }
    return { status: res.status, json, text };
  }

  async stop() {
    if (this.proc.exitCode === null) {
      const gone = new Promise(r => this.proc.once('exit', r));
      this.proc.kill('SIGKILL');
      await gone;
    }
    rmSync(this.dir, { recursive: true, force: true });
  }
}
