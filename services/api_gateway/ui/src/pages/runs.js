// Runs: filters (workflow, status, labels, time range), pages through the API's
// cursor, a status badge, the labels and the duration of each run, refreshed live;
// an operator can cancel or retry every run the filters match (a bulk operation,
// carried out in the background: its progress is shown until it is done).

import { get, post, query, session } from '../api.js';
import { h, mount } from '../dom.js';
import { clock, duration, shortId, when } from '../format.js';
import { notify } from '../message.js';

const STATUSES = ['PENDING', 'RUNNING', 'PAUSED', 'SUCCEEDED', 'FAILED', 'CANCELLED'];
const PAGE_SIZE = 25;
const REFRESH_MS = 3000;
const PROGRESS_MS = 1000;
// Runs counted before asking; past it, "more than".
const COUNT_LIMIT = 10000;

export function badge(status) {
  return h('span', { class: `badge status-${status.toLowerCase()}` }, status.toLowerCase());
}

/** A run's labels as small `key=value` chips in key order, each a link to the runs that carry it
 * (labels are plain text, never sealed: shown to every role). */
export function labelChips(labels) {
  return Object.entries(labels).sort(([a], [b]) => (a < b ? -1 : 1)).map(([k, v]) => h('a', {
    class: 'label-chip', href: `#/runs${query({ label: [`${k}:${v}`] })}`, title: `runs labelled ${k}=${v}`,
  }, `${k}=${v}`));
}

/** The label filter box's text, `customer:acme, env:prod`, as the API's `label` values. */
function labelFilters(text) {
  return text.split(',').map((part) => part.trim()).filter(Boolean);
}

/** A datetime-local value as RFC 3339 in UTC (the API wants a time zone). */
function isoOrEmpty(local) {
  return local ? new Date(local).toISOString() : '';
}

export function runsPage(main, params) {
  const filters = {
    workflow_id: params.get('workflow_id') || '',
    status: params.get('status') || '',
    label: params.getAll('label'),
    created_after: params.get('created_after') || '',
    created_before: params.get('created_before') || '',
  };
  const cursors = [null]; // cursors[i] opens page i
  let page = 0;
  let timer = null;
  let stopped = false;

  const workflowSelect = h('select', { name: 'workflow_id', id: 'filter-workflow' }, h('option', { value: '' }, 'any workflow'));
  const statusSelect = h('select', { name: 'status', id: 'filter-status' }, h('option', { value: '' }, 'any status'),
    STATUSES.map((s) => h('option', { value: s, selected: s === filters.status }, s.toLowerCase())));
  const labelBox = h('input', {
    type: 'text', name: 'label', id: 'filter-labels', size: 28, value: filters.label.join(', '),
    placeholder: 'customer:acme, env:prod', title: 'key:value, separated by commas: a run must carry every one',
  });
  const after = h('input', { type: 'datetime-local', name: 'created_after', id: 'filter-after', step: 1 });
  const before = h('input', { type: 'datetime-local', name: 'created_before', id: 'filter-before', step: 1 });
  const live = h('input', { type: 'checkbox', id: 'live', checked: true });
  const body = h('tbody');
  const pager = h('div', { class: 'pager' });
  const stamp = h('span', { class: 'muted', id: 'refreshed' });
  const bulkBar = h('div', { class: 'bulk', id: 'bulk' });
  let progressTimer = null;

  const form = h('form', { class: 'filters', id: 'run-filters' },
    h('label', {}, 'Workflow ', workflowSelect),
    h('label', {}, 'Status ', statusSelect),
    h('label', {}, 'Labels ', labelBox),
    h('label', {}, 'Created after ', after),
    h('label', {}, 'before ', before),
    h('button', { type: 'submit' }, 'Apply'),
    h('label', { class: 'live' }, live, ' live'),
    stamp);
  form.addEventListener('submit', (ev) => {
    ev.preventDefault();
    filters.workflow_id = workflowSelect.value;
    filters.status = statusSelect.value;
    filters.label = labelFilters(labelBox.value);
    filters.created_after = isoOrEmpty(after.value);
    filters.created_before = isoOrEmpty(before.value);
    cursors.length = 1;
    page = 0;
    drawBulk();
    load();
  });
  live.addEventListener('change', schedule);

  mount(main,
    h('h1', {}, 'Runs'),
    form,
    bulkBar,
    h('table', { class: 'runs', id: 'runs' },
      h('thead', {}, h('tr', {}, ['Run', 'Workflow', 'Status', 'Labels', 'Created', 'Duration', 'Error'].map((c) => h('th', {}, c)))),
      body),
    pager);

  get('/v1/workflows').then(({ workflows }) => {
    for (const wf of workflows) {
      workflowSelect.append(h('option', { value: wf.id, selected: wf.id === filters.workflow_id }, wf.id));
    }
  }).catch(notify);

  async function load() {
    clearTimeout(timer);
    try {
      const answer = await get(`/v1/runs${query({ ...filters, cursor: cursors[page], limit: PAGE_SIZE })}`);
      if (stopped) return;
      draw(answer);
      stamp.textContent = `updated ${clock(new Date())}`;
    } catch (err) {
      if (!stopped) notify(err);
    }
    schedule();
  }

  /** The filters the API's bulk actions take: those the listing applies now. */
  function bulkFilter() {
    const f = {};
    for (const [k, v] of Object.entries(filters)) if (Array.isArray(v) ? v.length : v) f[k] = v;
    return f;
  }

  function drawBulk() {
    if (!session.can('operator')) return mount(bulkBar);
    const none = !Object.keys(bulkFilter()).length;
    const why = none ? 'filter the runs first (workflow, status, labels or time)' : '';
    return mount(bulkBar,
      h('button', { type: 'button', id: 'bulk-cancel', disabled: none, title: why, onclick: () => ask('cancel') }, 'Cancel these…'),
      h('button', { type: 'button', id: 'bulk-retry', disabled: none, title: why, onclick: () => ask('retry') }, 'Retry these…'));
  }

  async function count() {
    let n = 0;
    let cursor = null;
    do {
      const page = await get(`/v1/runs${query({ ...filters, cursor, limit: 1000 })}`);
      n += page.runs.length;
      cursor = page.next_cursor;
    } while (cursor && n < COUNT_LIMIT);
    return cursor ? `more than ${n}` : String(n);
  }

  async function ask(action) {
    try {
      const n = await count();
      if (n === '0') return mount(bulkBar, h('span', { class: 'muted' }, `No runs match: nothing to ${action}.`), ' ', h('button', { type: 'button', onclick: drawBulk }, 'OK'));
      const what = action === 'cancel' ? 'Cancel' : 'Retry';
      return mount(bulkBar,
        h('span', { id: 'bulk-question' }, `${what} the ${n} run(s) these filters match?`), ' ',
        h('button', { type: 'button', id: 'bulk-yes', class: 'danger', onclick: () => act(action) }, `Yes, ${action} them`), ' ',
        h('button', { type: 'button', id: 'bulk-no', onclick: drawBulk }, 'No'));
    } catch (err) {
      return notify(err);
    }
  }

  async function act(action) {
    try {
      const started = await post(`/v1/runs/bulk/${action}`, { filter: bulkFilter() });
      follow(started.operation_id);
    } catch (err) {
      notify(err);
      drawBulk();
    }
  }

  async function follow(operationId) {
    clearTimeout(progressTimer);
    if (stopped) return;
    try {
      const op = await get(`/v1/operations/${operationId}`);
      const settled = op.done + op.skipped + op.failed;
      const verb = op.action === 'cancel' ? 'cancelled' : 'retried';
      mount(bulkBar, h('span', { id: 'bulk-progress', dataset: { state: op.state } },
        `${op.action}: ${settled} / ${op.total}${op.collected ? '' : '+'} — ${op.done} ${verb}, ${op.skipped} skipped, ${op.failed} failed`,
        op.state === 'DONE' ? ' (done)' : ' …'),
      op.last_error ? h('span', { class: 'error-text' }, ` ${op.last_error}`) : null,
      op.state === 'DONE' ? [' ', h('button', { type: 'button', onclick: drawBulk }, 'OK')] : null);
      if (op.state === 'DONE') load();
      else progressTimer = setTimeout(() => follow(operationId), PROGRESS_MS);
    } catch (err) {
      notify(err);
    }
  }

  function schedule() {
    clearTimeout(timer);
    if (!stopped && live.checked) timer = setTimeout(load, REFRESH_MS);
  }

  function draw({ runs, next_cursor: next }) {
    if (next) cursors[page + 1] = next;
    else cursors.length = page + 1;
    mount(body, runs.length ? runs.map((r) => h('tr', { dataset: { run: r.run_id, status: r.status } },
      h('td', {}, h('a', { href: `#/runs/${r.run_id}`, title: r.run_id, class: 'mono' }, shortId(r.run_id))),
      h('td', {}, h('a', { href: `#/workflows/${encodeURIComponent(r.workflow_id)}` }, r.workflow_id), h('span', { class: 'muted' }, ` v${r.version}`)),
      h('td', {}, badge(r.status)),
      h('td', { class: 'labels' }, labelChips(r.labels || {})),
      h('td', {}, when(r.created_at)),
      h('td', {}, duration(r.created_at, r.completed_at)),
      h('td', { class: 'error-cell', title: r.error || '' }, r.error || '')))
      : h('tr', {}, h('td', { colspan: 7, class: 'empty' }, 'No runs match these filters.')));
    mount(pager,
      h('button', { type: 'button', id: 'newer', disabled: page === 0, onclick: () => { page -= 1; load(); } }, '← Newer'),
      h('span', { class: 'muted' }, `page ${page + 1}`),
      h('button', { type: 'button', id: 'older', disabled: !cursors[page + 1], onclick: () => { page += 1; load(); } }, 'Older →'));
  }

  drawBulk();
  load();
  return () => {
    stopped = true;
    clearTimeout(timer);
    clearTimeout(progressTimer);
  };
}
