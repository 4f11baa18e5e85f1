// The skiff timeline page: reads the cluster's history from /debug/skiff/ (see
// api/src/replay/http.rs) and draws it. Plain JavaScript, no build step; every text from the
// server goes into the page as text nodes, never as HTML.
'use strict';

const $ = (selector) => document.querySelector(selector);
const SVG = 'http://www.w3.org/2000/svg';

/** An element with attributes (`on*` as listeners) and children (strings become text). */
function el(tag, attrs, ...children) {
  const node = tag.startsWith('svg:') ? document.createElementNS(SVG, tag.slice(4)) : document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === undefined || v === null || v === false) continue;
    if (k.startsWith('on')) node.addEventListener(k.slice(2), v);
    else if (k === 'text') node.textContent = v;
    else node.setAttribute(k, v === true ? '' : String(v));
  }
  for (const c of children.flat()) if (c !== null && c !== undefined) node.append(c instanceof Node ? c : String(c));
  return node;
}

const state = {
  kinds: [],
  filters: {},
  since: '',
  until: '',
  timeline: null,
  continueToken: null,
  live: false,
  liveAbort: null,
  view: 'point',
};

class ApiError extends Error {
  constructor(message, code) { super(message); this.code = code; }
}

/** GET /debug/skiff/ACTION with the non-empty params; the session cookie authenticates it. */
async function api(action, params = {}, signal) {
  const query = new URLSearchParams();
  for (const [k, v] of Object.entries(params)) if (v !== undefined && v !== null && v !== '') query.set(k, v);
  const response = await fetch(`/debug/skiff/${action}?${query}`, {
    credentials: 'same-origin', headers: { Accept: 'application/json' }, signal,
  });
  if (response.status === 401) { showLogin(); throw new ApiError('Log in to read the history.', 401); }
  const body = await response.json().catch(() => null);
  if (!response.ok) throw new ApiError((body && body.message) || `${response.status} ${response.statusText}`, response.status);
  return body;
}

function showError(e) {
  const box = $('#error');
  box.hidden = false;
  box.textContent = e ? (e.code ? `${e.code}: ${e.message}` : String(e.message || e)) : '';
  if (!e) box.hidden = true;
}

function status(text) { $('#status').textContent = text; }

const fmtTime = (t) => (t ? new Date(t).toISOString().replace('T', ' ').replace(/\.\d+Z$/, 'Z').replace(/Z$/, '') : '');
const fmtSecs = (s) => fmtTime(s * 1000);
const objName = (c) => (c.namespace ? `${c.namespace}/${c.name}` : c.name);
const opClass = (op) => (op === 'created' ? 'op-created' : op === 'deleted' ? 'op-deleted' : op === 'status updated' ? 'op-status' : '');

function kindInfo(kind, apiVersion) {
  const group = apiVersion && apiVersion.includes('/') ? apiVersion.split('/')[0] : '';
  return state.kinds.find((k) => k.kind === kind && (apiVersion === undefined || k.group === group))
    || state.kinds.find((k) => k.kind === kind);
}

/** The API path of a kind's list (in a namespace) as kubectl --raw takes it. */
function apiPath(info, namespace) {
  const base = info.group ? `/apis/${info.group}/${info.version}` : `/api/${info.version}`;
  return `${base}${info.namespaced && namespace ? `/namespaces/${namespace}` : ''}/${info.plural}`;
}

/** Copyable command lines that reproduce what is seen at revision `rev`. */
function commands(box, rev, object) {
  box.replaceChildren();
  const lines = [[`skiff replay --data-dir DATA_DIR --until ${rev} --into ./skiff-at-${rev}`, 'a copy of the log up to here; then skiff server --data-dir ./skiff-at-' + rev + ' --paused']];
  if (object) {
    const info = kindInfo(object.kind);
    if (info) {
      const ns = info.namespaced && object.namespace ? ` -n ${object.namespace}` : '';
      lines.push([`skiff get ${info.resource} ${object.name}${ns} --at ${rev} -o yaml`, 'this object then']);
      lines.push([`kubectl get --raw '${apiPath(info, object.namespace)}?fieldSelector=metadata.name%3D${encodeURIComponent(object.name)}&resourceVersion=${rev}&resourceVersionMatch=Exact'`, 'the same from the API']);
    }
  } else {
    lines.push([`skiff get all -A --at ${rev}`, 'the cluster then']);
    lines.push([`kubectl get --raw '/apis/apps/v1/deployments?resourceVersion=${rev}&resourceVersionMatch=Exact'`, 'one kind from the API']);
  }
  for (const [text, why] of lines) {
    const code = el('code', { title: why }, text);
    box.append(el('div', {}, code, el('button', {
      type: 'button', class: 'copy', onclick: async (ev) => {
        try { await navigator.clipboard.writeText(text); ev.target.textContent = 'Copied'; } catch {
          const range = document.createRange(); range.selectNodeContents(code);
          getSelection().removeAllRanges(); getSelection().addRange(range); ev.target.textContent = 'Selected';
        }
      },
    }, 'Copy')));
  }
}

// ---- Filters and window -------------------------------------------------------------------

function readFilters() {
  const f = {};
  for (const k of ['resource', 'namespace', 'name', 'labelSelector', 'manager']) f[k] = $(`#f-${k}`).value.trim();
  state.filters = f;
}

function windowParams() {
  return { since: state.since, until: state.until };
}

// ---- The timeline chart -------------------------------------------------------------------

const CHART = { w: 800, h: 220, top: 22, bottom: 20 };
const MAX_MARKERS_LISTED = 100;

function drawChart(t) {
  const box = $('#chart');
  const n = t.buckets.length;
  const bw = CHART.w / Math.max(n, 1);
  const plotH = CHART.h - CHART.top - CHART.bottom;
  const total = (b) => b.created + b.updated + b.statusUpdated + b.deleted;
  const max = Math.max(1, ...t.buckets.map(total));
  const svg = el('svg:svg', { viewBox: `0 0 ${CHART.w} ${CHART.h}`, preserveAspectRatio: 'none', 'data-buckets': n });
  if (!t.complete) {
    // Buckets before the scanned part: not counted (the request's bound), so grey.
    const firstScanned = t.buckets.findIndex((b) => b.firstRevision && b.firstRevision >= t.scannedFrom);
    if (firstScanned > 0) svg.append(el('svg:rect', { class: 'unscanned', x: 0, y: CHART.top, width: firstScanned * bw, height: plotH }));
  }
  t.buckets.forEach((b, i) => {
    let y = CHART.top + plotH;
    const x = i * bw;
    for (const [key, cls] of [['created', 'bar-created'], ['updated', 'bar-updated'], ['statusUpdated', 'bar-status'], ['deleted', 'bar-deleted']]) {
      const h = (b[key] / max) * plotH;
      if (h > 0) { y -= h; svg.append(el('svg:rect', { class: cls, x: x + 0.5, y, width: Math.max(bw - 1, 1), height: h })); }
    }
    let my = CHART.top - 6;
    for (const kind of ['delete', 'restart', 'nodeCondition', 'warning']) {
      const count = (b.markerCounts || {})[kind];
      if (!count) continue;
      const cx = x + bw / 2;
      const shape = kind === 'restart' ? el('svg:circle', { cx, cy: my, r: 4 })
        : el('svg:path', { d: kind === 'delete' ? `M${cx - 4},${my - 3}h8l-4,7z` : kind === 'warning' ? `M${cx - 4},${my + 3}h8l-4,-7z` : `M${cx},${my - 4}l4,4l-4,4l-4,-4z` });
      shape.setAttribute('class', `marker m-${kind}`);
      shape.append(el('svg:title', {}, `${count} ${kind}`));
      svg.append(shape);
      my -= 0; // markers of one bucket overlap on purpose: the list below names them all
    }
    const hit = el('svg:rect', { class: 'hit', x, y: 0, width: bw, height: CHART.h, 'data-index': i });
    hit.append(el('svg:title', {}, `${fmtSecs(b.start)}: ${total(b)} changes${b.lastRevision ? ` (r${b.firstRevision}..r${b.lastRevision})` : ''}`));
    svg.append(hit);
  });
  for (const i of [0, Math.floor(n / 2), n - 1]) {
    if (i < 0 || !t.buckets[i]) continue;
    svg.append(el('svg:text', { class: 'axis', x: Math.min(i * bw + 2, CHART.w - 120), y: CHART.h - 5 }, fmtSecs(t.buckets[i].start)));
  }
  svg.append(el('svg:text', { class: 'axis', x: 2, y: 12 }, `max ${max} per ${t.width}s`));
  const brush = el('svg:rect', { class: 'brush', x: 0, y: 0, width: 0, height: CHART.h, visibility: 'hidden' });
  svg.append(brush);
  attachBrush(svg, brush, t, bw);
  box.replaceChildren(svg);
  const counted = t.buckets.reduce((s, b) => s + total(b), 0);
  $('#chart-info').textContent = `r${t.from}..r${t.to} (${fmtSecs(t.start)} .. ${fmtSecs(t.end)}): ${counted} changes in ${n} buckets of ${t.width}s`
    + (t.complete ? '' : `; only r${t.scannedFrom} and newer counted (a view reads at most 20,000 revisions of the log that are not summarised yet; the server summarises the rest while the page is open): refresh in a moment, or zoom in`)
    + (t.pruned ? `; ${t.pruned} changes of pruned Leases/Events left out` : '')
    + (!t.complete && t.summarised ? ` (summarised so far: r${t.summarised[0]}..r${t.summarised[1]})` : '');
  // The newest markers, newest first: a long window can place thousands (each bucket keeps 20).
  const placed = t.buckets.flatMap((b) => b.markers || []).sort((a, b) => b.revision - a.revision);
  const shown = placed.slice(0, MAX_MARKERS_LISTED);
  const list = $('#markers');
  list.replaceChildren(...shown.map((m) => el('li', {}, el('span', { class: `m-${m.kind}` }, m.kind), ' ',
    el('a', { onclick: () => showPoint(String(m.revision)) }, `r${m.revision}`), ' ',
    el('a', { onclick: () => showObject({ kind: m.object_kind, namespace: m.namespace, name: m.name }, m.revision) }, `${m.object_kind} ${objName(m)}`),
    `: ${m.detail}`)));
  if (placed.length > shown.length) {
    list.append(el('li', { class: 'more' }, `${placed.length - shown.length} older markers not listed: zoom in to see them`));
  }
}

/** Drag across the chart to zoom to the selected buckets; a click picks that point in time. */
function attachBrush(svg, brush, t, bw) {
  let start = null;
  const toX = (ev) => {
    const r = svg.getBoundingClientRect();
    return Math.max(0, Math.min(CHART.w, ((ev.clientX - r.left) / r.width) * CHART.w));
  };
  svg.addEventListener('mousedown', (ev) => { start = toX(ev); ev.preventDefault(); });
  svg.addEventListener('mousemove', (ev) => {
    if (start === null) return;
    const x = toX(ev);
    brush.setAttribute('x', Math.min(start, x)); brush.setAttribute('width', Math.abs(x - start));
    brush.setAttribute('visibility', 'visible');
  });
  // One window listener for the current chart (a redraw replaces it).
  window.removeEventListener('mouseup', state.brushUp || (() => {}));
  state.brushUp = (ev) => {
    if (start === null) return;
    const end = toX(ev);
    const [a, b] = [Math.min(start, end), Math.max(start, end)];
    start = null;
    brush.setAttribute('visibility', 'hidden');
    const i0 = Math.floor(a / bw);
    const i1 = Math.min(t.buckets.length - 1, Math.floor(b / bw));
    if (b - a < 3) {
      const bucket = t.buckets[i0];
      if (bucket && bucket.lastRevision) showPoint(String(bucket.lastRevision));
      return;
    }
    const from = t.buckets[i0], to = t.buckets[i1];
    state.since = new Date(from.start * 1000).toISOString();
    state.until = new Date((to.start + t.width) * 1000).toISOString();
    setLive(false);
    $('#since').value = state.since; $('#until').value = state.until;
    refresh();
  };
  window.addEventListener('mouseup', state.brushUp);
}

// ---- The change list ----------------------------------------------------------------------

/** Who made a change: the user, its groups on hover; empty for the server's own writes. */
function userCell(u) {
  if (!u) return el('td', { class: 'user', title: 'the server itself, or from before users were recorded' }, '');
  const by = u.impersonatedBy ? ` (by ${u.impersonatedBy})` : '';
  return el('td', { class: 'user', title: `groups: ${(u.groups || []).join(', ') || 'none'}` }, u.username + by);
}

function changeRow(c) {
  return el('tr', { 'data-revision': c.revision },
    el('td', {}, el('a', { class: 'rev', title: 'the cluster at this revision', onclick: () => showPoint(String(c.revision)) }, String(c.revision))),
    el('td', {}, fmtTime(c.time)),
    el('td', { class: opClass(c.operation) }, c.operation, ...(c.markers || []).map((m) => el('span', { class: `m-${m.kind}`, title: m.detail }, ' \u25CF'))),
    el('td', {}, c.kind),
    el('td', {}, el('a', { class: 'obj', title: 'its versions', onclick: () => showObject(c, c.revision) }, objName(c))),
    el('td', {}, c.manager || ''),
    userCell(c.user),
    el('td', { class: 'fields' }, (c.fields || []).join(', ')));
}

async function loadChanges(more) {
  const page = await api('changes', { ...windowParams(), ...state.filters, limit: 100, continue: more ? state.continueToken : '' });
  const body = $('#changes tbody');
  if (!more) body.replaceChildren();
  for (const c of page.items) body.append(changeRow(c));
  state.continueToken = page.continue || null;
  $('#older').hidden = !state.continueToken;
  $('#list-info').textContent = `newest first, ${body.children.length} shown`;
}

async function refresh() {
  showError(null);
  readFilters();
  status('loading…');
  try {
    const [t] = await Promise.all([
      api('timeline', { ...windowParams(), ...state.filters, buckets: 80 }),
      loadChanges(false),
    ]);
    state.timeline = t;
    drawChart(t);
    status(`newest r${t.newest}, oldest retained r${t.oldest}`);
  } catch (e) {
    status('');
    if (e.code !== 401) showError(e);
  }
}

// ---- Live mode: the log's long poll ------------------------------------------------------

function setLive(on) {
  state.live = on;
  $('#live').checked = on;
  if (state.liveAbort) { state.liveAbort.abort(); state.liveAbort = null; }
  if (on) {
    state.since = ''; state.until = '';
    $('#since').value = ''; $('#until').value = '';
    follow();
  }
}

async function follow() {
  const abort = new AbortController();
  state.liveAbort = abort;
  await refresh();
  let next = state.timeline ? state.timeline.newest + 1 : 1;
  while (state.live && !abort.signal.aborted) {
    try {
      const page = await api('log', { since: next, wait: 20, resource: state.filters.resource, namespace: state.filters.namespace, limit: 1000 }, abort.signal);
      next = page.revision + 1;
      if (page.changes.length) { status(`live: r${page.revision}`); await refresh(); }
    } catch (e) {
      if (abort.signal.aborted) return;
      if (e.code === 401) { setLive(false); return; }
      showError(e);
      await new Promise((r) => setTimeout(r, 2000));
      if (e.code === 410 && state.timeline) next = state.timeline.oldest;
    }
  }
}

// ---- Objects: noise folded, side-by-side diffs ---------------------------------------------

/** The object as people read it: managedFields folded away, resourceVersion left out. */
function clean(o) {
  if (!o || typeof o !== 'object') return o;
  const copy = JSON.parse(JSON.stringify(o));
  if (copy.metadata) { delete copy.metadata.managedFields; delete copy.metadata.resourceVersion; }
  return copy;
}
const lines = (o) => (o ? JSON.stringify(clean(o), null, 2).split('\n') : []);

/** Line diff (longest common subsequence): [op, leftLine, rightLine] with op ' ', '-', '+'. */
function diffLines(a, b) {
  if (a.length * b.length > 4e6) return [...a.map((l) => ['-', l, null]), ...b.map((l) => ['+', null, l])];
  const m = a.length, n = b.length;
  const lcs = Array.from({ length: m + 1 }, () => new Uint32Array(n + 1));
  for (let i = m - 1; i >= 0; i--) for (let j = n - 1; j >= 0; j--) lcs[i][j] = a[i] === b[j] ? lcs[i + 1][j + 1] + 1 : Math.max(lcs[i + 1][j], lcs[i][j + 1]);
  const out = [];
  let i = 0, j = 0;
  while (i < m || j < n) {
    if (i < m && j < n && a[i] === b[j]) { out.push([' ', a[i], b[j]]); i++; j++; }
    else if (j < n && (i === m || lcs[i][j + 1] >= lcs[i + 1][j])) { out.push(['+', null, b[j]]); j++; }
    else { out.push(['-', a[i], null]); i++; }
  }
  return out;
}

/** A two-column diff table; long unchanged stretches fold to a line. */
function sideBySide(before, after) {
  const ops = diffLines(lines(before), lines(after));
  const rows = [];
  let k = 0, ln = 0, rn = 0;
  while (k < ops.length) {
    if (ops[k][0] === ' ') {
      let end = k; while (end < ops.length && ops[end][0] === ' ') end++;
      const run = end - k, context = 3;
      const keepAll = run <= context * 2 + 1;
      for (let x = k; x < end; x++) {
        ln++; rn++;
        const nearStart = x - k < context && k > 0, nearEnd = end - x <= context && end < ops.length;
        if (keepAll || nearStart || nearEnd) rows.push(el('tr', {}, el('td', { class: 'num' }, ln), el('td', {}, ops[x][1]), el('td', { class: 'num' }, rn), el('td', {}, ops[x][2])));
        else if (x === k + (k > 0 ? context : 0)) {
          const hidden = run - (k > 0 ? context : 0) - (end < ops.length ? context : 0);
          rows.push(el('tr', {}, el('td', { class: 'gap', colspan: 4 }, `\u2026 ${hidden} unchanged lines`)));
        }
      }
      k = end;
      continue;
    }
    const dels = [], adds = [];
    while (k < ops.length && ops[k][0] !== ' ') { (ops[k][0] === '-' ? dels : adds).push(ops[k]); k++; }
    for (let x = 0; x < Math.max(dels.length, adds.length); x++) {
      const d = dels[x], a = adds[x];
      rows.push(el('tr', {},
        el('td', { class: 'num' }, d ? ++ln : ''), el('td', { class: d ? 'del' : '' }, d ? d[1] : ''),
        el('td', { class: 'num' }, a ? ++rn : ''), el('td', { class: a ? 'add' : '' }, a ? a[2] : '')));
    }
  }
  const folded = [before, after].some((o) => o && o.metadata && o.metadata.managedFields);
  return el('div', {},
    el('table', { class: 'diff' }, el('thead', {}, el('tr', {}, el('th', { class: 'num' }), el('th', {}, 'before'), el('th', { class: 'num' }), el('th', {}, 'after'))), el('tbody', {}, rows)),
    folded ? el('p', { class: 'note' }, 'metadata.managedFields and resourceVersion folded away') : null);
}

// ---- Views ------------------------------------------------------------------------------

function showView(name) {
  state.view = name;
  for (const v of ['point', 'object', 'compare']) $(`#view-${v}`).hidden = v !== name;
  for (const b of document.querySelectorAll('#tabs button')) b.classList.toggle('active', b.dataset.view === name);
}

async function showPoint(at, namespace) {
  showView('point');
  $('#point-at').value = at;
  if (namespace !== undefined) $('#point-namespace').value = namespace;
  showError(null);
  try {
    const snap = await api('snapshot', { at, namespace: $('#point-namespace').value.trim() });
    $('#point-title').textContent = `The cluster at r${snap.revision}${snap.time ? ` (${fmtTime(snap.time)})` : ''}`;
    $('#compare-from').value = String(snap.revision);
    commands($('#point-commands'), snap.revision);
    $('#point-object').replaceChildren();
    const box = $('#point-tables');
    box.replaceChildren();
    for (const k of snap.kinds) {
      const rows = k.rows.map((r) => el('tr', {},
        el('td', {}, r.namespace || ''),
        el('td', {}, el('a', { onclick: () => showObjectAt(k, r, snap.revision) }, r.name)),
        el('td', {}, r.resourceVersion), el('td', {}, fmtTime(r.created)), el('td', {}, r.summary)));
      box.append(el('div', { class: 'kind-table', 'data-kind': k.kind },
        el('h3', {}, `${k.kind} (${k.total}${k.total > k.rows.length ? `, first ${k.rows.length} shown` : ''})`),
        el('table', {}, el('thead', {}, el('tr', {}, el('th', {}, 'namespace'), el('th', {}, 'name'), el('th', {}, 'rev'), el('th', {}, 'created'), el('th', {}, ''))), el('tbody', {}, rows))));
    }
    if (snap.pruned && snap.pruned.length) box.append(el('p', { class: 'note' }, `Left out, their history here is pruned: ${snap.pruned.map((p) => `${p.kind} (from r${p.compacted})`).join(', ')}`));
  } catch (e) { if (e.code !== 401) showError(e); }
}

/** One object as it was at a point, with a link to its versions. */
async function showObjectAt(k, row, rev) {
  try {
    const got = await api('get', { resource: k.resource, namespace: row.namespace, name: row.name, at: rev });
    const o = got.items[0];
    const ref = { kind: k.kind, namespace: row.namespace, name: row.name };
    commands($('#point-commands'), rev, ref);
    $('#point-object').replaceChildren(el('div', { class: 'object-at' },
      el('h3', {}, `${k.kind} ${objName(ref)} at r${rev} `, el('a', { onclick: () => showObject(ref, rev) }, '(versions and diffs)')),
      el('pre', { id: 'point-yaml' }, JSON.stringify(clean(o), null, 2)),
      el('p', { class: 'note' }, 'metadata.managedFields folded away')));
  } catch (e) { if (e.code !== 401) showError(e); }
}

/** An object's versions; `rev` picks the version shown against the one before it. */
async function showObject(ref, rev) {
  showView('object');
  showError(null);
  const info = kindInfo(ref.kind);
  if (!info) { showError(new Error(`unknown kind ${ref.kind}`)); return; }
  $('#object-title').textContent = `${ref.kind} ${objName(ref)}`;
  try {
    const h = await api('history', { resource: info.resource, namespace: ref.namespace, name: ref.name });
    const versions = h.versions;
    const pick = (r) => {
      let idx = versions.findIndex((v) => v.revision >= r);
      if (idx < 0 || versions[idx].revision !== r) idx = versions.length - 1 - [...versions].reverse().findIndex((v) => v.revision <= r);
      if (idx < 0 || idx >= versions.length) idx = versions.length - 1;
      return idx;
    };
    const select = (idx) => {
      const v = versions[idx];
      for (const tr of document.querySelectorAll('#versions tbody tr')) tr.classList.toggle('selected', Number(tr.dataset.revision) === v.revision);
      const before = idx > 0 ? versions[idx - 1] : null;
      const after = v.operation === 'deleted' ? null : v.object;
      $('#diff-title').textContent = `r${before ? before.revision : '\u2013'} \u2192 r${v.revision}: ${v.operation}${v.manager ? ` by ${v.manager}` : ''}${v.user ? ` (user ${v.user.username})` : ''}`;
      $('#object-diff').replaceChildren(sideBySide(before && before.operation !== 'deleted' ? before.object : null, after));
      commands($('#object-commands'), v.revision, ref);
      links(ref, v);
    };
    const body = $('#versions tbody');
    body.replaceChildren(...versions.map((v, idx) => el('tr', { 'data-revision': v.revision },
      el('td', {}, el('a', { onclick: () => select(idx) }, String(v.revision))),
      el('td', {}, fmtTime(v.time)), el('td', { class: opClass(v.operation) }, v.operation), el('td', {}, v.manager || ''),
      userCell(v.user))));
    if (!versions.length) { $('#object-diff').replaceChildren(el('p', {}, 'No retained versions: it never existed in the retained history.')); return; }
    select(pick(rev === undefined ? Infinity : rev));
  } catch (e) { if (e.code !== 401) showError(e); }
}

/** Links to the owners and to the owned objects of a version, at its revision. */
async function links(ref, v) {
  const box = $('#object-links');
  box.replaceChildren();
  const owners = ((v.object.metadata || {}).ownerReferences || []);
  const parts = [];
  for (const o of owners) parts.push(el('a', { class: 'owner', onclick: () => showObject({ kind: o.kind, namespace: ref.namespace, name: o.name }, v.revision) }, `${o.kind} ${o.name}`));
  if (parts.length) box.append(el('div', {}, 'owned by ', ...parts.flatMap((p, i) => (i ? [', ', p] : [p]))));
  const uid = (v.object.metadata || {}).uid;
  if (!uid || v.operation === 'deleted') return;
  try {
    const owned = await api('owned', { uid, namespace: ref.namespace, at: v.revision });
    if (owned.length) box.append(el('div', {}, `owns at r${v.revision}: `, ...owned.flatMap((o, i) => {
      const a = el('a', { class: 'owned', onclick: () => showObject(o, v.revision) }, `${o.kind} ${o.name}`);
      return i ? [', ', a] : [a];
    })));
  } catch (e) { /* the owner links stand on their own */ }
}

async function compare(from, to) {
  showView('compare');
  showError(null);
  try {
    const d = await api('diff', { from, to, resource: state.filters.resource, namespace: state.filters.namespace });
    const counts = { created: 0, changed: 0, deleted: 0 };
    for (const o of d.objects) counts[o.diff]++;
    $('#compare-info').textContent = `r${d.from} \u2192 r${d.to}: ${counts.created} created, ${counts.changed} changed, ${counts.deleted} deleted`
      + (d.pruned && d.pruned.length ? `; left out (pruned): ${d.pruned.map((p) => p.kind).join(', ')}` : '');
    commands($('#compare-commands'), d.to);
    $('#compare-list').replaceChildren(...d.objects.map((o) => {
      const details = el('details', { 'data-diff': o.diff },
        el('summary', {}, el('span', { class: opClass(o.diff === 'changed' ? 'updated' : o.diff) }, o.diff), ` ${o.kind} ${objName(o)}`));
      details.addEventListener('toggle', () => {
        if (details.open && details.children.length === 1) details.append(sideBySide(o.before, o.after));
      });
      return details;
    }));
  } catch (e) { if (e.code !== 401) showError(e); }
}

// ---- Login ------------------------------------------------------------------------------

function showLogin() {
  $('#login').hidden = false;
  $('#app').hidden = true;
  $('#logout').hidden = true;
}

async function login(ev) {
  ev.preventDefault();
  const token = $('#token').value.trim();
  const response = await fetch('/ui/login', {
    method: 'POST', credentials: 'same-origin',
    headers: { 'Content-Type': 'application/x-www-form-urlencoded' },
    body: new URLSearchParams({ token }),
  });
  $('#token').value = '';
  if (!response.ok) { $('#login-error').textContent = 'That token is not accepted.'; return; }
  $('#login-error').textContent = '';
  start();
}

async function start() {
  try {
    state.kinds = await api('kinds');
  } catch (e) {
    if (e.code !== 401) showError(e);
    return;
  }
  $('#login').hidden = true;
  $('#app').hidden = false;
  $('#logout').hidden = false;
  const select = $('#f-resource');
  select.replaceChildren(el('option', { value: '' }, 'all kinds'), ...state.kinds.map((k) => el('option', { value: k.resource }, `${k.kind} (${k.resource})`)));
  showView('point');
  await refresh();
}

function init() {
  $('#login-form').addEventListener('submit', login);
  $('#logout').addEventListener('click', async () => { setLive(false); await fetch('/ui/logout', { method: 'POST', credentials: 'same-origin' }); showLogin(); });
  $('#window-form').addEventListener('submit', (ev) => {
    ev.preventDefault();
    state.since = $('#since').value.trim(); state.until = $('#until').value.trim();
    if (state.since || state.until) setLive(false);
    refresh();
  });
  $('#reset-window').addEventListener('click', () => { state.since = state.until = ''; $('#since').value = $('#until').value = ''; refresh(); });
  $('#filters').addEventListener('submit', (ev) => { ev.preventDefault(); refresh(); });
  $('#clear-filters').addEventListener('click', () => { $('#filters').reset(); refresh(); });
  $('#live').addEventListener('change', (ev) => setLive(ev.target.checked));
  $('#older').addEventListener('click', () => loadChanges(true).catch(showError));
  $('#point-form').addEventListener('submit', (ev) => { ev.preventDefault(); showPoint($('#point-at').value.trim() || 'now'); });
  $('#compare-form').addEventListener('submit', (ev) => { ev.preventDefault(); compare($('#compare-from').value.trim(), $('#compare-to').value.trim() || 'now'); });
  for (const b of document.querySelectorAll('#tabs button')) b.addEventListener('click', () => showView(b.dataset.view));
  start();
}

document.addEventListener('DOMContentLoaded', init);
