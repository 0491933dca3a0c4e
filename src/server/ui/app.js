// The dashboard (docs/dashboard.md): one request a second to
// /api/v1/overview for everything live; the bucket browser and the editor
// ask the API only when the user acts. Plain DOM, no library: the page is
// served by kayak itself and must work without the internet.

const POLL_MS = 1000;
const HISTORY = 300;           // samples kept per component: 5 minutes at 1 s
const $ = (sel, root = document) => root.querySelector(sel);

const page = {
  token: sessionStorage.getItem('kayak-token') || '',
  data: null,                  // the last overview
  history: new Map(),          // "pipeline/component" -> {t: [], out: [], errors: []}
  timer: 0,
  view: null,                  // {name, arg, update(data), leave()}
  graphShape: '',
};

// ---------- the API ----------

class AuthNeeded extends Error {}

async function api(method, path, body) {
  const headers = {};
  if (page.token) headers.Authorization = 'Bearer ' + page.token;
  if (body !== undefined) headers['Content-Type'] = 'application/yaml';
  const res = await fetch(path, { method, headers, body, cache: 'no-store' });
  if (res.status === 401 || res.status === 403) {
    showLogin(res.status === 403 && page.token ? 'That token was refused.' : '');
    throw new AuthNeeded();
  }
  let json = null;
  try { json = await res.json(); } catch { json = null; }
  return { status: res.status, ok: res.ok, json: json || {} };
}

// ---------- small helpers ----------

function el(tag, attrs = {}, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (v === undefined || v === null || v === false) continue;
    if (k === 'class') e.className = v;
    else if (k === 'text') e.textContent = v;
    else if (k.startsWith('on')) e.addEventListener(k.slice(2), v);
    else e.setAttribute(k, v === true ? '' : v);
  }
  for (const c of children.flat()) if (c !== null && c !== undefined) e.append(c);
  return e;
}

function svg(tag, attrs = {}, ...children) {
  const e = document.createElementNS('http://www.w3.org/2000/svg', tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (k === 'text') e.textContent = v; else e.setAttribute(k, v);
  }
  for (const c of children.flat()) if (c) e.append(c);
  return e;
}

function num(n) { return Number(n || 0).toLocaleString('en-US'); }
function rate(r) {
  if (r === null || r === undefined) return '–';
  return r >= 100 ? num(Math.round(r)) : r.toFixed(r >= 10 ? 1 : 2);
}
function bytes(n) {
  if (!n) return '0 B';
  const u = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];
  let i = 0;
  while (n >= 1024 && i < u.length - 1) { n /= 1024; i++; }
  return (i ? n.toFixed(1) : n) + ' ' + u[i];
}
function time(ms) { return ms ? new Date(ms).toLocaleTimeString('en-GB') : '–'; }
function ago(ms, now) {
  if (!ms) return 'never';
  const s = Math.max(0, (now - ms) / 1000);
  if (s < 60) return s.toFixed(s < 10 ? 1 : 0) + ' s ago';
  if (s < 3600) return Math.floor(s / 60) + ' min ago';
  return Math.floor(s / 3600) + ' h ago';
}
function pipeHref(id) { return '#/pipeline/' + encodeURIComponent(id); }
function bucketHref(name) { return '#/state/' + encodeURIComponent(name); }

// ---------- history: rates and sparklines ----------

function record(data) {
  const now = data.now_ms;
  const seen = new Set();
  for (const p of data.pipelines) {
    for (const c of p.components) {
      const key = p.id + '/' + c.name;
      seen.add(key);
      let h = page.history.get(key);
      if (!h) { h = { t: [], out: [], errors: [] }; page.history.set(key, h); }
      const last = h.out.length - 1;
      if (last >= 0 && c.messages_out < h.out[last]) { h.t.length = h.out.length = h.errors.length = 0; }
      h.t.push(now); h.out.push(c.messages_out); h.errors.push(c.errors);
      if (h.t.length > HISTORY) { h.t.shift(); h.out.shift(); h.errors.shift(); }
    }
  }
  for (const key of page.history.keys()) if (!seen.has(key)) page.history.delete(key);
}

// Messages a second over the last few samples, or null before two.
function rateOf(key) {
  const h = page.history.get(key);
  if (!h || h.t.length < 2) return null;
  const a = Math.max(0, h.t.length - 4), b = h.t.length - 1;
  const dt = (h.t[b] - h.t[a]) / 1000;
  return dt > 0 ? (h.out[b] - h.out[a]) / dt : null;
}

// Errors in the last minute.
function recentErrors(key) {
  const h = page.history.get(key);
  if (!h || !h.t.length) return 0;
  const b = h.t.length - 1;
  let a = b;
  while (a > 0 && h.t[b] - h.t[a - 1] <= 60000) a--;
  return h.errors[b] - h.errors[a];
}

function sparkline(key) {
  const h = page.history.get(key);
  const box = svg('svg', { class: 'spark', viewBox: '0 0 300 28', preserveAspectRatio: 'none',
                           'aria-hidden': 'true' });
  if (!h || h.t.length < 2) return box;
  const rates = [];
  for (let i = 1; i < h.t.length; i++) {
    const dt = (h.t[i] - h.t[i - 1]) / 1000;
    rates.push(dt > 0 ? (h.out[i] - h.out[i - 1]) / dt : 0);
  }
  const max = Math.max(1, ...rates);
  const step = 300 / Math.max(1, HISTORY - 2);
  const x0 = 300 - step * (rates.length - 1);
  const pts = rates.map((r, i) => (x0 + i * step).toFixed(1) + ',' + (26 - 24 * r / max).toFixed(1));
  box.append(svg('polyline', { points: pts.join(' ') }));
  return box;
}

// ---------- status of pipelines ----------

function heldPipelines(data) {
  const held = new Set();
  for (const r of data.checkpoints.regions || []) {
    if (r.held_back) for (const id of r.pipelines) held.add(id);
  }
  return held;
}

function pipelineState(p, held) {
  const states = p.components.map(c => c.state);
  if (p.status === 'failed' || states.includes('failed')) return 'failed';
  if (states.includes('retrying')) return 'retrying';
  if (held.has(p.id)) return 'held';
  if (p.status === 'finished') return 'finished';
  if (p.status === 'running') return 'running';
  return p.status;
}
const STATE_TEXT = { held: 'held back' };

// ---------- the graph: a layered layout, left to right ----------

const NODE_W = 176, NODE_H = 50, GAP_X = 70, GAP_Y = 26, PAD = 24;

function layout(data) {
  const nodes = new Map();   // id -> {id, kind, name, col, row}
  const edges = [];          // {from, to, bucket}
  const level = new Map();
  for (const p of data.pipelines) {          // upstreams come first
    let l = 0;
    for (const u of p.upstreams) l = Math.max(l, (level.get(u) ?? -1) + 1);
    level.set(p.id, l);
    nodes.set('p:' + p.id, { id: 'p:' + p.id, kind: 'pipeline', name: p.id, col: 2 * l });
  }
  for (const p of data.pipelines) {
    for (const u of p.upstreams) if (nodes.has('p:' + u)) edges.push({ from: 'p:' + u, to: 'p:' + p.id });
  }
  const names = new Set(data.buckets.map(b => b.name));
  for (const p of data.pipelines) for (const u of p.buckets || []) names.add(u.bucket);
  for (const name of names) {
    const writers = data.pipelines.filter(p => (p.buckets || []).some(u => u.bucket === name && u.writes));
    const readers = data.pipelines.filter(p => (p.buckets || []).some(u => u.bucket === name && !u.writes));
    let col = 1;
    if (writers.length) col = 2 * Math.max(...writers.map(p => level.get(p.id))) + 1;
    else if (readers.length) col = 2 * Math.min(...readers.map(p => level.get(p.id))) - 1;
    nodes.set('b:' + name, { id: 'b:' + name, kind: 'bucket', name, col });
    for (const p of writers) edges.push({ from: 'p:' + p.id, to: 'b:' + name, bucket: true });
    for (const p of readers) edges.push({ from: 'b:' + name, to: 'p:' + p.id, bucket: true });
  }
  // Columns without a node go; then each column is ordered by where its
  // nodes' neighbours on the left sit (the barycentre), to cross fewer edges.
  const cols = [...new Set([...nodes.values()].map(n => n.col))].sort((a, b) => a - b);
  const columns = cols.map(c => [...nodes.values()].filter(n => n.col === c));
  columns.forEach((column, i) => column.forEach((n, row) => { n.col = i; n.row = row; }));
  for (let sweep = 0; sweep < 2; sweep++) {
    for (const column of columns) {
      const centre = n => {
        const rows = edges.filter(e => (e.to === n.id && nodes.get(e.from).col < n.col) ||
                                       (e.from === n.id && nodes.get(e.to).col < n.col))
                          .map(e => nodes.get(e.to === n.id ? e.from : e.to).row);
        return rows.length ? rows.reduce((a, b) => a + b, 0) / rows.length : n.row;
      };
      const keyed = column.map(n => [centre(n), n.row, n]);
      keyed.sort((a, b) => a[0] - b[0] || a[1] - b[1]);
      keyed.forEach(([, , n], row) => { n.row = row; });
    }
  }
  // Pipelines take the upper rows, buckets a band below them, so that an
  // edge between two pipelines never runs through a bucket.
  const count = kind => Math.max(0, ...columns.map(c => c.filter(n => n.kind === kind).length));
  const top = Math.max(1, count('pipeline')), band = count('bucket');
  const height = top + band;
  for (const column of columns) {
    column.sort((a, b) => a.row - b.row);
    const pipes = column.filter(n => n.kind === 'pipeline'), buckets = column.filter(n => n.kind === 'bucket');
    const offset = (top - pipes.length) / 2;
    pipes.forEach((n, i) => { n.slot = offset + i; });
    buckets.forEach((n, i) => { n.slot = top + i; });
    for (const n of column) {
      n.x = PAD + n.col * (NODE_W + GAP_X);
      n.y = PAD + 14 + n.slot * (NODE_H + GAP_Y);
    }
  }
  return { nodes, edges, width: 2 * PAD + columns.length * (NODE_W + GAP_X) - GAP_X,
           height: 2 * PAD + 14 + height * (NODE_H + GAP_Y) - GAP_Y };
}

function shapeOf(data) {
  return JSON.stringify([data.pipelines.map(p => [p.id, p.upstreams, p.buckets]),
                         data.buckets.map(b => b.name),
                         (data.checkpoints.regions || []).map(r => r.pipelines)]);
}

function drawGraph(host, data) {
  const g = layout(data);
  const root = svg('svg', { viewBox: `0 0 ${g.width} ${g.height}`, width: g.width, height: g.height,
                            role: 'group', 'aria-label': 'the pipeline graph' });
  root.append(svg('defs', {}, svg('marker', { id: 'arrow', viewBox: '0 0 10 10', refX: 9, refY: 5,
    markerWidth: 7, markerHeight: 7, orient: 'auto-start-reverse' },
    svg('path', { d: 'M0,0 L10,5 L0,10 z', fill: '#8a94a3' }))));
  for (const r of data.checkpoints.regions || []) {
    const members = r.pipelines.map(id => g.nodes.get('p:' + id)).filter(Boolean);
    if (members.length < 2) continue;
    const x0 = Math.min(...members.map(n => n.x)) - 10, y0 = Math.min(...members.map(n => n.y)) - 20;
    const x1 = Math.max(...members.map(n => n.x)) + NODE_W + 10;
    const y1 = Math.max(...members.map(n => n.y)) + NODE_H + 8;
    root.append(svg('rect', { class: 'region', x: x0, y: y0, width: x1 - x0, height: y1 - y0, rx: 8 }),
                svg('text', { class: 'region-label', x: x0 + 6, y: y0 + 12, text: 'region ' + r.region }));
  }
  for (const e of g.edges) {
    const a = g.nodes.get(e.from), b = g.nodes.get(e.to);
    const x1 = a.x + NODE_W, y1 = a.y + NODE_H / 2, x2 = b.x, y2 = b.y + NODE_H / 2;
    const bend = Math.max(30, Math.abs(x2 - x1) / 2);
    root.append(svg('path', { class: 'edge' + (e.bucket ? ' bucket' : ''), 'marker-end': 'url(#arrow)',
      'data-from': e.from, 'data-to': e.to,
      d: `M${x1},${y1} C${x1 + bend},${y1} ${x2 - bend},${y2} ${x2},${y2}` }));
  }
  for (const n of g.nodes.values()) {
    const href = n.kind === 'pipeline' ? pipeHref(n.name) : bucketHref(n.name);
    const node = svg('g', { class: 'node ' + n.kind, tabindex: 0, role: 'link', 'data-id': n.id,
                            transform: `translate(${n.x},${n.y})` },
      svg('rect', { width: NODE_W, height: NODE_H, rx: n.kind === 'bucket' ? 14 : 5 }),
      svg('text', { x: 10, y: 20, class: 'name', text: clip((n.kind === 'bucket' ? '⛁ ' : '') + n.name, 24) }),
      svg('text', { x: 10, y: 38, class: 'sub', text: '' }));
    const go = () => { location.hash = href; };
    node.addEventListener('click', go);
    node.addEventListener('keydown', ev => { if (ev.key === 'Enter' || ev.key === ' ') { ev.preventDefault(); go(); } });
    root.append(node);
  }
  host.replaceChildren(root);
}

function clip(s, n) { return s.length > n ? s.slice(0, n - 1) + '…' : s; }

function updateGraph(host, data) {
  const shape = shapeOf(data);
  if (shape !== page.graphShape || !host.firstChild) { drawGraph(host, data); page.graphShape = shape; }
  const held = heldPipelines(data);
  for (const p of data.pipelines) {
    const node = host.querySelector(`g.node[data-id="${CSS.escape('p:' + p.id)}"]`);
    if (!node) continue;
    const st = pipelineState(p, held);
    node.setAttribute('class', 'node pipeline ' + st);
    node.dataset.state = st;
    const r = rateOf(p.id + '/input');
    const errors = p.components.reduce((a, c) => a + c.errors, 0);
    node.querySelector('.sub').textContent =
      (STATE_TEXT[st] || st) + ' · ' + rate(r) + ' msg/s' + (errors ? ' · ' + num(errors) + ' err' : '');
    node.setAttribute('aria-label', `pipeline ${p.id}: ${STATE_TEXT[st] || st}, ${rate(r)} messages a second, ${errors} errors`);
  }
  for (const b of data.buckets) {
    const node = host.querySelector(`g.node[data-id="${CSS.escape('b:' + b.name)}"]`);
    if (!node) continue;
    node.querySelector('.sub').textContent = num(b.size) + (b.size === 1 ? ' entry' : ' entries');
    node.setAttribute('aria-label', `bucket ${b.name}: ${b.size} entries`);
  }
}

// ---------- cards ----------

function cardContent(p, c, now) {
  const key = p.id + '/' + c.name;
  const r = rateOf(key);
  const recent = recentErrors(key);
  const rows = [
    ['in', num(c.messages_in)],
    ['out', num(c.messages_out) + ' (' + rate(r) + '/s)'],
  ];
  const errors = el('dd', { class: 'errors' + (c.errors ? ' some' : ''),
                            text: num(c.errors) + (recent ? ` (+${num(recent)} in the last minute)` : '') });
  if (c.kind === 'input') {
    if (c.position) rows.push(['position', c.position]);
    if (c.lag) rows.push(['lag', num(c.lag.value) + ' ' + c.lag.unit]);
  }
  if (c.kind === 'output' && c.retries) rows.push(['retries', num(c.retries)]);
  if (c.dead_letters) rows.push(['dead letters', num(c.dead_letters)]);
  if (c.memory_bytes) rows.push(['memory', bytes(c.memory_bytes)]);
  if (c.set_aside) rows.push(['set aside', num(c.set_aside)]);
  const q = (p.queues || []).find(x => x.name === c.name || (c.kind === 'input' && x.name.startsWith('edge:')));
  if (q && c.kind !== 'transform') rows.push(['queue', num(q.depth) + ' batches']);
  if (c.state !== 'running' && c.state_since_ms) rows.push([c.state + ' since', time(c.state_since_ms)]);
  const dl = el('dl', {}, ...rows.flatMap(([k, v]) => [el('dt', { text: k }), el('dd', { text: v })]),
                el('dt', { text: 'errors' }), errors);
  return [
    el('div', { class: 'title' }, el('strong', { text: c.type }),
       el('span', { class: 'badge ' + c.state, text: c.state })),
    el('div', { class: 'muted', text: c.name }),
    dl,
    sparkline(key),
    c.last_error ? el('div', { class: 'last-error', role: 'note' },
      (c.last_error_ms ? time(c.last_error_ms) + ' ' : '') + c.last_error) : null,
  ];
}

function updateCards(host, p, now) {
  for (const c of p.components) {
    let card = host.querySelector(`.card[data-name="${CSS.escape(c.name)}"]`);
    if (!card) {
      card = el('div', { class: 'card', 'data-name': c.name });
      host.append(card);
    }
    card.className = 'card ' + c.state;
    card.dataset.errors = c.errors;
    card.dataset.out = c.messages_out;
    card.dataset.deadLetters = c.dead_letters || 0;
    card.dataset.memory = c.memory_bytes || 0;
    card.replaceChildren(...cardContent(p, c, now).filter(Boolean));
  }
  for (const card of [...host.children]) {
    if (!p.components.some(c => c.name === card.dataset.name)) card.remove();
  }
}

function pipelineSection(p) {
  return el('section', { class: 'pipeline', 'data-id': p.id, 'aria-label': 'pipeline ' + p.id },
    el('div', { class: 'pipeline-head' },
      el('h2', {}, el('a', { href: pipeHref(p.id), text: p.id })),
      el('span', { class: 'badge state' }),
      el('span', { class: 'muted meta' })),
    el('div', { class: 'cards' }));
}

function updatePipelineSection(sec, p, data, held) {
  const st = pipelineState(p, held);
  const badge = $('.badge.state', sec);
  badge.className = 'badge state ' + st;
  badge.textContent = STATE_TEXT[st] || st;
  const from = p.upstreams.length ? 'reads ' + p.upstreams.join(', ') + ' · ' : '';
  const uses = (p.buckets || []).map(b => (b.writes ? 'writes ' : 'reads ') + b.bucket);
  $('.meta', sec).textContent = 'version ' + p.version + ' · ' + from + uses.join(', ') +
    (p.memory_paused ? ' · input waits for the memory budget' : '');
  updateCards($('.cards', sec), p, data.now_ms);
}

// ---------- views ----------

function graphView() {
  const graph = el('section', { id: 'graph', 'aria-labelledby': 'graph-h' },
    el('h2', { id: 'graph-h', text: 'Graph' }), el('div', { class: 'canvas' }),
    el('div', { class: 'legend', 'aria-hidden': 'true' },
      ...['running', 'retrying', 'failed', 'held', 'finished'].map(s => el('span', { class: s, text: STATE_TEXT[s] || s }))));
  const list = el('div', { id: 'pipelines' });
  $('#main').replaceChildren(graph, list);
  page.graphShape = '';
  return {
    update(data) {
      updateGraph($('.canvas', graph), data);
      const held = heldPipelines(data);
      const ids = data.pipelines.map(p => p.id);
      for (const sec of [...list.children]) if (!ids.includes(sec.dataset.id)) sec.remove();
      data.pipelines.forEach((p, i) => {
        let sec = list.querySelector(`section[data-id="${CSS.escape(p.id)}"]`);
        if (!sec) sec = pipelineSection(p);
        if (list.children[i] !== sec) list.insertBefore(sec, list.children[i] || null);
        updatePipelineSection(sec, p, data, held);
      });
    },
  };
}

function pipelineView(id) {
  const live = el('div');
  const select = el('select', { id: 'version', 'aria-label': 'version' });
  const gutter = el('div', { class: 'gutter', 'aria-hidden': 'true' });
  const text = el('textarea', { id: 'yaml', spellcheck: 'false', 'aria-label': 'the pipeline as YAML',
                                autocapitalize: 'off', autocomplete: 'off' });
  const problems = el('ul', { class: 'problems', id: 'problems', role: 'alert' });
  const note = el('p', { class: 'note', id: 'note', role: 'status' });
  const planList = el('ul', { class: 'plan', id: 'plan', 'aria-label': 'what the change does to state' });
  let bad = new Set();
  let versions = [];
  let lossArmed = false;  // a 409 showed what the change drops: the next Apply accepts it
  const disarmLoss = () => { lossArmed = false; const b = $('#apply'); if (b) b.textContent = 'Apply'; };

  const paintGutter = () => {
    const lines = text.value.split('\n').length;
    gutter.replaceChildren(...Array.from({ length: lines }, (_, i) =>
      el('div', { class: bad.has(i + 1) ? 'bad' : null, text: String(i + 1) })));
    gutter.scrollTop = text.scrollTop;
  };
  text.addEventListener('input', () => {
    bad = new Set(); text.removeAttribute('aria-invalid'); paintGutter(); disarmLoss(); planList.replaceChildren();
  });
  text.addEventListener('scroll', () => { gutter.scrollTop = text.scrollTop; });

  const goToLine = line => {
    const starts = [0];
    for (let i = 0; i < text.value.length; i++) if (text.value[i] === '\n') starts.push(i + 1);
    const s = starts[Math.max(0, Math.min(line - 1, starts.length - 1))];
    const e = text.value.indexOf('\n', s);
    text.focus();
    text.setSelectionRange(s, e < 0 ? text.value.length : e);
    const lh = parseFloat(getComputedStyle(text).lineHeight) || 18;
    text.scrollTop = Math.max(0, (line - 3) * lh);
  };

  const say = (msg, error) => { note.textContent = msg; note.className = 'note' + (error ? ' error' : ''); };

  const loadVersions = async keepText => {
    const r = await api('GET', `/api/v1/pipelines/${encodeURIComponent(id)}/versions`);
    if (!r.ok) { say(r.json.error || 'no versions', true); return; }
    versions = r.json.versions || [];
    select.replaceChildren(...versions.slice().reverse().map(v => el('option', { value: v.version,
      text: `version ${v.version} · ${v.change} · ${new Date(v.created_ms).toLocaleString('en-GB')}` +
            (v.version === r.json.current ? ' (running)' : '') })));
    const cur = versions.find(v => v.version === r.json.current) || versions[versions.length - 1];
    if (cur) select.value = String(cur.version);
    if (!keepText && cur) { text.value = cur.body; paintGutter(); }
    $('#revert').disabled = versions.length < 2 || !r.json.current;
  };
  select.addEventListener('change', () => {
    const v = versions.find(x => String(x.version) === select.value);
    if (v) { text.value = v.body; bad = new Set(); paintGutter(); say(`showing version ${v.version}; Apply makes it the newest`); }
  });

  const act = async fn => {
    const all = [...document.querySelectorAll('.actions button')];
    all.forEach(b => { b.disabled = true; });
    try { await fn(); } catch (e) { if (!(e instanceof AuthNeeded)) say(String(e), true); }
    finally { all.forEach(b => { b.disabled = false; }); $('#revert').disabled = versions.length < 2; }
  };

  const showErrors = r => {
    const errs = r.json.errors || [];
    bad = new Set(errs.map(e => e.line).filter(Boolean));
    paintGutter();
    if (errs.length) text.setAttribute('aria-invalid', 'true');
    problems.replaceChildren(...errs.map(e => el('li', {},
      el('button', { type: 'button', text: `line ${e.line}:${e.column}`, onclick: () => goToLine(e.line) }),
      ' ' + e.message)));
    say(r.json.error || `refused (${r.status})`, true);
    if (errs.length && errs[0].line) goToLine(errs[0].line);
  };
  // The plan of a change (PUT ?dry_run=1, or a 409's): one line per
  // component that keeps state or loses it, one per region.
  const showPlan = plan => {
    const words = { kept: 'kept', starts_empty: 'starts empty', dropped: 'dropped', new: 'new' };
    const rows = (plan.components || []).filter(c => c.state !== 'none').map(c => el('li', {
      class: c.loses_state && c.kind === 'state' ? 'loses' : null, 'data-state': c.state,
      'data-component': c.component,
      text: `${c.component}: ${words[c.state] || c.state} (${c.why})` }));
    const regions = (plan.regions || []).map(r => el('li', { class: 'muted', 'data-region': r.region,
      text: `region ${r.region}: ${r.says}` }));
    planList.replaceChildren(...rows, ...regions);
  };
  const lossSummary = plan => `this change drops the committed state of ${plan.losing_components} ` +
    `component${plan.losing_components === 1 ? '' : 's'} (${bytes(plan.lost_bytes)})`;
  const planChange = () => act(async () => {
    problems.replaceChildren(); say('planning…');
    const r = await api('PUT', `/api/v1/pipelines/${encodeURIComponent(id)}?dry_run=1`, text.value);
    if (!r.ok) { planList.replaceChildren(); showErrors(r); return; }
    showPlan(r.json.plan);
    say(r.json.plan.drops_state ? lossSummary(r.json.plan) + '; Apply asks before it does'
                                : 'this change keeps all committed state', r.json.plan.drops_state);
  });
  const apply = () => act(async () => {
    problems.replaceChildren(); say('applying…');
    const accept = lossArmed;
    disarmLoss();
    const r = await api('PUT', `/api/v1/pipelines/${encodeURIComponent(id)}` +
                        (accept ? '?accept_state_loss=1' : ''), text.value);
    if (r.ok) {
      planList.replaceChildren();
      say(`applied: version ${r.json.version} (${r.json.change})` + savepointNote(r.json));
      await loadVersions(false);
      return;
    }
    if (r.status === 409 && r.json.plan && r.json.plan.drops_state) {
      showPlan(r.json.plan);
      lossArmed = true;
      $('#apply').textContent = 'Apply and lose state';
      say(lossSummary(r.json.plan) + ': press "Apply and lose state" to make it anyway', true);
      return;
    }
    showErrors(r);
  });
  const revert = () => act(async () => {
    say('reverting…');
    const r = await api('POST', `/api/v1/pipelines/${encodeURIComponent(id)}/revert`);
    if (r.ok) { say(`reverted: version ${r.json.version}` + savepointNote(r.json)); await loadVersions(false); }
    else say(r.json.error || `revert refused (${r.status})`, true);
  });
  const restart = () => act(async () => {
    say('restarting…');
    const r = await api('POST', `/api/v1/pipelines/${encodeURIComponent(id)}/restart`);
    say(r.ok ? 'restarted' + savepointNote(r.json) : (r.json.error || `restart refused (${r.status})`), !r.ok);
  });
  let armed = false;
  const del = () => {
    const b = $('#delete');
    if (!armed) { armed = true; b.textContent = 'Confirm delete'; say(`Deleting drops ${id}'s checkpointed state; press again to delete.`); return; }
    return act(async () => {
      const r = await api('DELETE', `/api/v1/pipelines/${encodeURIComponent(id)}`);
      if (r.ok) { location.hash = '#/graph'; return; }
      armed = false; b.textContent = 'Delete';
      say((r.json.error || `delete refused (${r.status})`) +
          (r.json.downstreams ? ' (read by ' + r.json.downstreams.join(', ') + ')' : ''), true);
    });
  };

  const editor = el('section', { 'aria-labelledby': 'cfg-h' },
    el('h2', { id: 'cfg-h', text: 'Configuration' }),
    el('p', { class: 'muted', text: 'Secret options show as ***: type them again before applying, or use ${ENV} references.' }),
    el('div', { class: 'actions' }, select),
    el('div', { class: 'editor' }, gutter, text),
    problems,
    planList,
    el('div', { class: 'actions' },
      el('button', { id: 'plan-change', type: 'button', onclick: planChange, text: 'Plan' }),
      el('button', { id: 'apply', type: 'button', onclick: apply, text: 'Apply' }),
      el('button', { id: 'revert', type: 'button', onclick: revert, text: 'Revert to previous version' }),
      el('button', { id: 'restart', type: 'button', onclick: restart, text: 'Restart' }),
      el('button', { id: 'delete', type: 'button', class: 'danger', onclick: del, text: 'Delete' })),
    note);
  const head = el('section', { class: 'pipeline', 'data-id': id },
    el('div', { class: 'pipeline-head' }, el('h2', { text: 'Pipeline ' + id }),
      el('span', { class: 'badge state' }), el('span', { class: 'muted meta' })),
    el('div', { class: 'cards' }));
  $('#main').replaceChildren(head, live, editor);
  loadVersions(false).catch(() => {});
  return {
    update(data) {
      const p = data.pipelines.find(x => x.id === id);
      live.replaceChildren(p ? '' : el('p', { class: 'muted', text: `${id} is not running.` }));
      if (p) updatePipelineSection(head, p, data, heldPipelines(data));
    },
  };
}

function savepointNote(j) {
  return j.savepoint_missed && j.savepoint_missed.length
    ? '; savepoint missed, replays from the last checkpoint: ' + j.savepoint_missed.map(s => s.region).join(', ')
    : '';
}

function checkpointsView() {
  const host = el('div', { id: 'checkpoints' });
  $('#main').replaceChildren(host);
  let shape = '';
  return {
    update(data) {
      const cp = data.checkpoints;
      if (!cp.checkpointing) {
        host.replaceChildren(el('section', {}, el('h2', { text: 'Checkpoints' }),
          el('p', { text: 'Checkpointing is off: the server runs without --state-dir.' })));
        shape = '';
        return;
      }
      const s = cp.regions.map(r => r.region).join('\n');
      if (s !== shape) {
        shape = s;
        host.replaceChildren(...cp.regions.map(r => el('section', { class: 'region', 'data-region': r.region },
          el('h2', { text: 'Region ' + r.region }), el('p', { class: 'muted members' }),
          el('dl', { class: 'summary cards' }), el('h3', { text: 'History (newest first)' }),
          el('table', {}, el('thead', {}, el('tr', {}, ...['checkpoint', 'status', 'at', 'duration',
            'written', 'reused', 'barrier pause', 'reason'].map((h, i) =>
              el('th', { class: i && i < 7 && i > 2 ? 'num' : null, scope: 'col', text: h })))),
            el('tbody')))));
      }
      for (const r of cp.regions) {
        const sec = host.querySelector(`section[data-region="${CSS.escape(r.region)}"]`);
        $('.members', sec).textContent = 'pipelines: ' + r.pipelines.join(', ');
        const facts = [
          ['last committed', r.last_committed_id ? `#${r.last_committed_id}, ${ago(r.last_committed_ms, data.now_ms)}` : 'none yet'],
          ['duration', r.duration_ms + ' ms'],
          ['written', bytes(r.bytes_written) + ' (reused ' + bytes(r.bytes_reused) + ')'],
          ['barrier pause', (r.barrier_pause_us / 1000).toFixed(1) + ' ms (longest ' + (r.longest_barrier_pause_us / 1000).toFixed(1) + ' ms)'],
          ['committed / abandoned', num(r.committed) + ' / ' + num(r.abandoned)],
        ];
        if (r.exposure) facts.push(['a kill now replays', 'at most ' + num(r.exposure.messages) + ' messages']);
        if (r.exposure && r.exposure.not_committing && !r.held_back) {
          facts.push(['not committing', r.exposure.not_committing]);
        }
        if (r.held_back) facts.push(['held back', r.held_back]);
        if (r.last_error) facts.push(['last error', r.last_error]);
        $('.summary', sec).replaceChildren(...facts.map(([k, v]) =>
          el('div', { class: 'card' + (k === 'held back' || k === 'last error' || k === 'not committing' ? ' failed' : '') },
            el('dt', { class: 'muted', text: k }), el('dd', { text: v }))));
        $('tbody', sec).replaceChildren(...(r.history || []).map(h => el('tr', { class: h.status },
          el('td', { text: '#' + h.id }), el('td', { class: h.status === 'committed' ? null : 'error', text: h.status }),
          el('td', { text: time(h.at_ms) }), el('td', { class: 'num', text: h.duration_ms + ' ms' }),
          el('td', { class: 'num', text: bytes(h.bytes_written) }), el('td', { class: 'num', text: bytes(h.bytes_reused) }),
          el('td', { class: 'num', text: (h.barrier_pause_us / 1000).toFixed(1) + ' ms' }),
          el('td', { class: 'wrap', text: h.reason || '' }))));
      }
    },
  };
}

function stateView(name) {
  const table = el('tbody');
  const list = el('section', { 'aria-labelledby': 'buckets-h' }, el('h2', { id: 'buckets-h', text: 'Buckets' }),
    el('table', {}, el('thead', {}, el('tr', {}, el('th', { scope: 'col', text: 'bucket' }),
      el('th', { class: 'num', scope: 'col', text: 'entries' }), el('th', { scope: 'col', text: 'written by' }),
      el('th', { scope: 'col', text: 'read by' }))), table));
  const parts = [list];
  if (name) parts.push(browser(name));
  $('#main').replaceChildren(...parts);
  return {
    update(data) {
      table.replaceChildren(...data.buckets.map(b => {
        const users = w => data.pipelines.filter(p => (p.buckets || []).some(u => u.bucket === b.name && u.writes === w)).map(p => p.id).join(', ');
        return el('tr', { 'data-bucket': b.name }, el('td', {}, el('a', { href: bucketHref(b.name), text: b.name })),
          el('td', { class: 'num', text: num(b.size) }), el('td', { text: users(true) }), el('td', { text: users(false) }));
      }));
      if (!data.buckets.length) table.replaceChildren(el('tr', {}, el('td', { colspan: 4, class: 'muted', text: 'no buckets' })));
    },
  };
}

// A page of a bucket's entries in key order, or one key.
function browser(name) {
  const key = el('input', { id: 'key', type: 'search', placeholder: 'key', 'aria-label': 'key to look up' });
  const rows = el('tbody');
  const note = el('p', { class: 'note', role: 'status' });
  const next = el('button', { type: 'button', text: 'Next page', disabled: true });
  const pages = [''];
  let after = '';
  const show = entries => rows.replaceChildren(...entries.map(e => el('tr', {},
    el('td', { text: e.key }), el('td', { class: 'wrap' }, el('pre', { class: 'value', text: JSON.stringify(e.value) })),
    el('td', { text: time(e.last_write_ms) }))));
  const load = async from => {
    const r = await api('GET', `/api/v1/buckets/${encodeURIComponent(name)}?limit=50` + (from ? '&after=' + encodeURIComponent(from) : ''));
    if (!r.ok) { note.textContent = r.json.error || `error ${r.status}`; note.className = 'note error'; return; }
    after = from;
    show(r.json.entries);
    next.disabled = !r.json.next_after;
    next.dataset.after = r.json.next_after || '';
    note.className = 'note';
    note.textContent = `${num(r.json.size)} ${r.json.size === 1 ? 'entry' : 'entries'}; showing ${r.json.entries.length}` + (from ? ` after ${from}` : '');
  };
  next.addEventListener('click', () => { pages.push(after); load(next.dataset.after).catch(() => {}); });
  const first = el('button', { type: 'button', text: 'First page', onclick: () => { pages.length = 1; load('').catch(() => {}); } });
  const form = el('form', { class: 'searchbar', role: 'search' }, key, el('button', { type: 'submit', text: 'Find' }), first, next);
  form.addEventListener('submit', async ev => {
    ev.preventDefault();
    if (!key.value) return load('').catch(() => {});
    const r = await api('GET', `/api/v1/buckets/${encodeURIComponent(name)}?key=${encodeURIComponent(key.value)}`).catch(() => null);
    if (!r) return;
    if (r.status === 404) { show([]); note.textContent = `no entry for ${key.value}`; note.className = 'note'; return; }
    if (!r.ok) { note.textContent = r.json.error || `error ${r.status}`; note.className = 'note error'; return; }
    show([r.json]); next.disabled = true; note.className = 'note'; note.textContent = 'one entry';
  });
  load('').catch(() => {});
  return el('section', { id: 'browser', 'aria-labelledby': 'browser-h' },
    el('h2', { id: 'browser-h', text: 'Bucket ' + name }), form, note,
    el('table', {}, el('thead', {}, el('tr', {}, el('th', { scope: 'col', text: 'key' }),
      el('th', { scope: 'col', text: 'value' }), el('th', { scope: 'col', text: 'last write' }))), rows));
}

// ---------- the frame ----------

function route() {
  const [, name = 'graph', ...rest] = (location.hash || '#/graph').split('/');
  const arg = rest.length ? decodeURIComponent(rest.join('/')) : '';
  for (const a of document.querySelectorAll('header nav a')) {
    if (a.dataset.view === (name === 'pipeline' ? 'graph' : name)) a.setAttribute('aria-current', 'page');
    else a.removeAttribute('aria-current');
  }
  if (name === 'pipeline' && arg) page.view = pipelineView(arg);
  else if (name === 'checkpoints') page.view = checkpointsView();
  else if (name === 'state') page.view = stateView(arg);
  else page.view = graphView();
  document.title = 'kayak · ' + (arg || name);
  if (page.data) page.view.update(page.data);
}

function showReasons(data) {
  const box = $('#reasons');
  const status = $('#status');
  status.className = data.ready ? 'ready' : 'notready';
  status.textContent = (data.ready ? 'ready' : 'not ready') + ' · ' + time(data.now_ms);
  if (data.ready) { box.hidden = true; box.replaceChildren(); return; }
  box.hidden = false;
  box.replaceChildren(el('strong', { text: 'Not ready' }), el('ul', {}, ...data.reasons.map(r => el('li', {
    text: [r.reason, r.pipeline || r.region || '', r.component || '',
           r.used_bytes ? bytes(r.used_bytes) + ' of ' + bytes(r.limit_bytes) : '',
           r.most_in ? '— most in ' + [r.most_in.pipeline, r.most_in.component].filter(Boolean).join(' ') +
             ' (' + r.most_in.kind + ', ' + bytes(r.most_in.bytes) + ')' : '',
           r.since_ms ? 'since ' + time(r.since_ms) : '', (r.why || r.last_error) ? '— ' + (r.why || r.last_error) : '']
      .filter(Boolean).join(' ') }))));
}

// The memory budget in the header: what is charged, of the limit, and
// what holds the most (in its title).
function showMemory(data) {
  const m = data.memory;
  const box = $('#memory');
  if (!m) { box.hidden = true; return; }
  box.hidden = false;
  box.className = m.exceeded ? 'exceeded' : '';
  box.dataset.used = m.used_bytes;
  box.dataset.limit = m.limit_bytes;
  box.textContent = 'memory ' + bytes(m.used_bytes) + (m.limit_bytes ? ' of ' + bytes(m.limit_bytes) : '') +
    (m.inputs_waiting ? ' · ' + m.inputs_waiting + ' input' + (m.inputs_waiting > 1 ? 's' : '') + ' waiting' : '');
  box.title = (m.top || []).map(u => (u.pipeline ? u.pipeline + ' ' : '') + u.component + ' (' + u.kind + '): ' +
    bytes(u.bytes)).join('\n');
}

function showLogin(message) {
  clearTimeout(page.timer);
  page.timer = 0;
  $('#login').hidden = false;
  $('#main').hidden = true;
  $('#login-error').textContent = message || '';
  $('#status').textContent = 'token needed';
  $('#token').focus();
}

async function poll() {
  page.timer = 0;
  try {
    const r = await api('GET', '/api/v1/overview');
    if (r.ok) {
      page.data = r.json;
      record(r.json);
      showReasons(r.json);
      showMemory(r.json);
      if (page.view) page.view.update(r.json);
    } else {
      $('#status').textContent = r.status === 503 ? 'the graph is changing…' : `error ${r.status}`;
    }
  } catch (e) {
    if (e instanceof AuthNeeded) return;   // the login form restarts polling
    $('#status').className = 'notready';
    $('#status').textContent = 'kayak is not answering';
  }
  page.timer = setTimeout(poll, POLL_MS);
}

function start() {
  $('#login').addEventListener('submit', ev => {
    ev.preventDefault();
    page.token = $('#token').value.trim();
    sessionStorage.setItem('kayak-token', page.token);
    $('#login').hidden = true;
    $('#main').hidden = false;
    route();
    if (!page.timer) poll();
  });
  document.addEventListener('visibilitychange', () => {
    if (!document.hidden && !page.timer && $('#login').hidden) poll();
  });
  window.addEventListener('hashchange', route);
  route();
  poll();
}

start();
