// One run: its definition's graph coloured by task state, a side panel for
// the selected node, and the actions cancel, pause or resume, retry from a node and signal.
// While the run moves the page reads it again every second.

import { get, parseJsonInput, post, session } from '../api.js';
import { h, mount } from '../dom.js';
import { attempt, duration, itemsProgress, json, when } from '../format.js';
import { drawGraph, graphViewer, legend, tasksByNode } from '../graph.js';
import { notify } from '../message.js';
import { attemptsBlock, timelineTable } from '../timeline.js';
import { badge, labelChips } from './runs.js';

const REFRESH_MS = 1000;
const TERMINAL = new Set(['SUCCEEDED', 'FAILED', 'CANCELLED']);
const definitions = new Map(); // "workflow@version" → spec: a version never changes

async function definition(workflowId, version) {
  const key = `${workflowId}@${version}`;
  if (!definitions.has(key)) {
    const answer = await get(`/v1/workflows/${encodeURIComponent(workflowId)}/versions/${version}`);
    definitions.set(key, answer.spec);
  }
  return definitions.get(key);
}

function field(label, value, cls) {
  return value === undefined || value === null || value === '' ? null
    : [h('dt', {}, label), h('dd', { class: cls }, value)];
}

/** The runs this run's SUB_WORKFLOW nodes started: one link each, with its status. */
function childLinks(children) {
  return h('ul', { class: 'children', id: 'run-children' }, ...children.map((c) => h('li', {},
    h('a', { href: `#/runs/${encodeURIComponent(c.run_id)}` }, c.run_id), ' ', badge(c.status),
    ` ${c.workflow_id} v${c.version} (${c.node_id}, attempt ${c.attempt + 1}${c.on_parent_cancel === 'abandon' ? ', abandoned on cancel' : ''})`)));
}

function block(title, value, cls = '') {
  return value === undefined || value === null ? null
    : h('section', { class: 'block' }, h('h3', {}, title), h('pre', { class: cls }, json(value)));
}

// A payload the API withheld from this (viewer) token: said so, never left blank.
const REDACTED_NOTE = 'redacted: this token has the viewer role and the workflow does not set viewers_see_payloads';

function redactedBlock(title) {
  return h('section', { class: 'block' }, h('h3', {}, title),
    h('p', { class: 'muted redacted', title: REDACTED_NOTE }, 'redacted'));
}

/** The block of a payload, or "redacted" when the API withheld it (`item.redacted`). */
function payload(item, title, value, cls = '') {
  return item.redacted ? redactedBlock(title) : block(title, value, cls);
}

function signalsBlock(signals) {
  if (!signals || signals.length === 0) return null;
  return h('details', { class: 'card', id: 'run-signals' }, h('summary', {}, `Signals (${signals.length})`),
    h('table', { class: 'signals' },
      h('thead', {}, h('tr', {}, h('th', {}, 'signal'), h('th', {}, 'sent by'), h('th', {}, 'sent'),
        h('th', {}, 'taken by'), h('th', {}, 'payload'))),
      h('tbody', {}, ...signals.map((s) => h('tr', {},
        h('td', { class: 'mono' }, s.name),
        h('td', { class: 'sent-by' }, s.sent_by || '—'),
        h('td', {}, when(s.created_at)),
        h('td', {}, s.consumed_by || 'buffered'),
        h('td', {}, s.redacted ? h('span', { class: 'muted redacted', title: REDACTED_NOTE }, 'redacted')
          : h('code', {}, json(s.payload))))))));
}

// -- task logs: what each attempt of the selected node logged -------------------

/** The lines of each attempt that logged, newest attempt last; redacted for a viewer. */
function logsBlock(answer) {
  if (!answer || answer.logs.length === 0) {
    return h('section', { class: 'block' }, h('h3', {}, 'Log'), h('p', { class: 'muted', id: 'node-log-empty' }, 'Nothing logged.'));
  }
  if (answer.redacted) return redactedBlock('Log');
  return answer.logs.map((entry) => h('section', { class: 'block task-log', dataset: { attempt: String(entry.attempt) } },
    h('h3', {}, `Log · attempt ${entry.attempt + 1}`, entry.truncated ? h('span', { class: 'muted' }, ` (${entry.truncated} lines truncated)`) : null),
    h('pre', { class: 'log-lines' }, (entry.lines || []).join('\n'))));
}

/** A notice for the run when it waits for a slot of its concurrency key or for its
 * resume (paused), and for each task that waits on a queue no live worker serves, on a
 * limit or on the run's resume (their waiting_hint). */
function waitingHints(tasks, run) {
  const hinted = (tasks || []).filter((t) => t.waiting_hint);
  if (hinted.length === 0 && !(run && run.waiting_hint)) return null;
  const paused = run && run.status === 'PAUSED';
  // where to look next: the Limits page, the Workers page, or nowhere (a pause: Resume)
  const link = (hint) => {
    if (paused && /paused/.test(hint)) return null;
    return /limit|slot/.test(hint) ? h('a', { href: '#/limits' }, 'Limits') : h('a', { href: '#/workers' }, 'Workers');
  };
  return h('div', { class: 'waiting-hints', role: 'status' },
    run && run.waiting_hint
      ? h('p', { class: 'waiting-hint run-waiting-hint' },
        h('strong', {}, 'This run'), ` waits: ${run.waiting_hint} `, link(run.waiting_hint))
      : null,
    ...hinted.map((t) => h('p', { class: 'waiting-hint', dataset: { node: t.node_id } },
      h('strong', {}, t.node_id), ` waits: ${t.waiting_hint} `, link(t.waiting_hint))));
}

/** How many of a MAP node's items the node panel shows at once. */
const ITEMS_PAGE = 50;

export function runPage(main, runId) {
  let run = null;
  let spec = null;
  let selected = null;
  let timer = null;
  let stopped = false;
  let formsKey = null;
  let entries = []; // the run's history, oldest first (the Timeline tab, the node's attempts)
  let tab = 'graph';
  let logsKey = null;
  const logsPane = h('div', { class: 'node-logs', id: 'node-logs' });
  const itemsPane = h('section', { class: 'block node-items', id: 'node-items' });
  let itemsKey = null;
  let itemsStart = 0;

  const head = h('div', { class: 'run-head' });
  const viewer = graphViewer('graph');
  const details = h('div', { class: 'node-details', id: 'node-details' });
  const nodeActions = h('div', { class: 'node-actions' });
  const runActions = h('section', { class: 'run-actions' });
  const extra = h('div', { class: 'run-extra' });
  const hints = h('div', { id: 'waiting-hints' });
  const timelinePane = h('section', { class: 'card', id: 'timeline-pane', hidden: true });
  const body = h('div', { class: 'run-body' },
    h('section', { class: 'card graph-card' }, viewer.element, legend()),
    h('aside', { class: 'card side', id: 'side' }, details, nodeActions));
  const tabButton = (name, label) => h('button', {
    type: 'button', role: 'tab', id: `tab-${name}`, 'aria-selected': String(tab === name),
    onclick: () => { tab = name; showTab(); },
  }, label);
  const tabs = h('div', { class: 'tabs', role: 'tablist' }, tabButton('graph', 'Graph'), tabButton('timeline', 'Timeline'));
  mount(main,
    h('p', { class: 'crumbs' }, h('a', { href: '#/runs' }, '← Runs')),
    head,
    hints,
    tabs,
    body,
    timelinePane,
    runActions,
    extra);

  function showTab() {
    for (const button of tabs.children) button.setAttribute('aria-selected', String(button.id === `tab-${tab}`));
    body.hidden = tab !== 'graph';
    timelinePane.hidden = tab !== 'timeline';
    if (run) draw();
  }

  async function load() {
    clearTimeout(timer);
    try {
      const next = await get(`/v1/runs/${encodeURIComponent(runId)}`);
      const nextSpec = await definition(next.workflow_id, next.version);
      const history = await get(`/v1/runs/${encodeURIComponent(runId)}/history?limit=1000`);
      if (stopped) return;
      run = next;
      entries = history.entries;
      spec = nextSpec;
      if (selected === null) selected = pickDefault();
      draw();
    } catch (err) {
      if (stopped) return;
      notify(err);
      if (err.status === 404 || err.status === 400) return; // no such run: nothing to refresh
    }
    if (!stopped && (!run || !TERMINAL.has(run.status))) timer = setTimeout(load, REFRESH_MS);
  }

  function pickDefault() {
    const tasks = [...tasksByNode(run.tasks).values()];
    const pick = tasks.find((t) => t.state === 'FAILED')
      || tasks.find((t) => ['WAITING', 'RUNNING', 'QUEUED'].includes(t.state));
    return pick ? pick.node_id : null;
  }

  function select(nodeId) {
    if (nodeId !== selected) { itemsStart = 0; itemsKey = null; }
    selected = nodeId;
    draw();
  }

  function draw() {
    const tasks = tasksByNode(run.tasks);
    const terminal = TERMINAL.has(run.status);
    mount(head,
      h('h1', {}, 'Run ', h('span', { class: 'mono', id: 'run-id' }, run.run_id), ' ', h('span', { id: 'run-status' }, badge(run.status))),
      h('dl', { class: 'meta' },
        field('workflow', h('a', { href: `#/workflows/${encodeURIComponent(run.workflow_id)}?version=${run.version}` }, `${run.workflow_id} v${run.version}`)),
        field('created', when(run.created_at)),
        field('finished', run.completed_at ? when(run.completed_at) : null),
        field('duration', duration(run.created_at, run.completed_at)),
        field('labels', Object.keys(run.labels || {}).length ? labelChips(run.labels) : null, 'labels'),
        field('parent', run.parent ? h('a', { href: `#/runs/${encodeURIComponent(run.parent.run_id)}`, id: 'run-parent' },
          `${run.parent.run_id} (${run.parent.node_id}, attempt ${run.parent.attempt + 1})`) : null),
        field('children', (run.children || []).length ? childLinks(run.children) : null, 'children'),
        field('scheduled', run.schedule_id ? h('span', { id: 'run-schedule' }, 'by ',
          h('a', { href: `#/schedules/${encodeURIComponent(run.schedule_id)}` }, run.schedule_id),
          ` for ${when(run.scheduled_for)}`) : null),
        field('started by', run.started_by, 'started-by'),
        field('cancelled by', run.cancelled_by, 'cancelled-by'),
        field('retried by', run.retried_by, 'retried-by'),
        field('error', run.redacted && ['FAILED', 'CANCELLED'].includes(run.status)
          ? h('span', { class: 'muted redacted', title: REDACTED_NOTE }, 'redacted') : run.error, 'error-text')));
    mount(hints, waitingHints(run.tasks, run));
    viewer.show(drawGraph(spec, { tasks, selected, onSelect: select, available: viewer.available() }));
    mount(timelinePane, h('h2', {}, 'Timeline'), timelineTable(entries, (nodeId) => { tab = 'graph'; selected = nodeId; showTab(); }));
    drawDetails(tasks);
    const key = `${selected}|${run.status}|${session.role}`;
    if (key !== formsKey) { // redraw forms only when what they offer changes: keep what is typed
      formsKey = key;
      drawActions(tasks, terminal, run.status === 'PAUSED');
    }
    mount(extra,
      h('details', { class: 'card', id: 'run-payloads' }, h('summary', {}, 'Run input, config and output'),
        payload(run, 'Input', run.input), payload(run, 'Config', run.config), payload(run, 'Output', run.output),
        run.context ? block('Calling context', run.context) : null),
      signalsBlock(run.signals));
  }

  function drawDetails(tasks) {
    if (!selected) {
      mount(details, h('h2', {}, 'Select a node'),
        h('p', { class: 'muted' }, 'Click a node of the graph to see its input, output, error, attempts and timings.'));
      return;
    }
    const node = (spec.nodes || []).find((n) => n.id === selected) || { id: selected, type: '?' };
    const task = tasks.get(selected);
    if (!task) {
      mount(details, h('h2', { id: 'node-title' }, node.id, ' ', h('span', { class: 'muted' }, node.type)),
        h('p', { class: 'muted', id: 'node-state' }, 'Not reached in this run.'),
        block('Definition', node));
      return;
    }
    const ran = task.started_at ? duration(task.started_at, task.finished_at) : null;
    mount(details,
      h('h2', { id: 'node-title' }, node.id, ' ', h('span', { class: 'muted' }, node.type)),
      h('dl', { class: 'facts' },
        field('state', h('span', { class: `badge state-${task.state.toLowerCase()}`, id: 'node-state' }, task.state.toLowerCase())),
        task.items ? field('items', itemsProgress(task), 'items-progress') : field('attempt', attempt(task), 'attempts'),
        field('queue', task.queue),
        field('no worker', task.waiting_hint, 'waiting-hint-text'),
        field('chose', Array.isArray(task.branches) ? (task.branches.join(', ') || 'no branch') : null),
        field('waits for signal', task.state === 'WAITING' ? task.awaited_signal : null, 'awaited'),
        field('wakes at', task.state === 'WAITING' && task.wake_at ? when(task.wake_at) : null, 'wake-at'),
        field('created', when(task.created_at)),
        field('started', task.started_at ? when(task.started_at) : null),
        field('finished', task.finished_at ? when(task.finished_at) : null),
        field('ran for', ran)),
      task.error ? h('section', { class: 'block' }, h('h3', {}, 'Error', task.error_code ? ` (${task.error_code})` : ''),
        h('pre', { class: 'error-text', id: 'node-error' }, task.error)) : null,
      task.redacted && ['FAILED', 'CANCELLED'].includes(task.state) ? redactedBlock(task.error_code ? `Error (${task.error_code})` : 'Error') : null,
      task.items ? itemsPane : null,
      attemptsBlock(entries, selected),
      payload(task, 'Input', task.input),
      payload(task, 'Output', task.output),
      task.queue ? logsPane : null,
      h('details', {}, h('summary', {}, 'Definition'), h('pre', {}, json(node))));
    if (task.queue) refreshLogs(task);
    if (task.items) refreshItems(task);
  }

  /** A MAP node's items, a page at a time, read again when its progress moved. */
  async function refreshItems(task) {
    const key = `${task.node_id}|${itemsProgress(task)}|${task.state}|${itemsStart}`;
    if (key === itemsKey) return;
    itemsKey = key;
    try {
      const page = await get(`/v1/runs/${encodeURIComponent(runId)}/tasks/${encodeURIComponent(task.node_id)}/items?start=${itemsStart}&limit=${ITEMS_PAGE}`);
      if (stopped || itemsKey !== key) return;
      const counts = Object.entries(task.items.counts).map(([state, n]) => `${n} ${state.toLowerCase()}`).join(', ');
      mount(itemsPane,
        h('h3', {}, `Items · ${itemsProgress(task)}`, h('span', { class: 'muted' }, counts ? ` (${counts})` : '')),
        h('table', { class: 'items-table', id: 'items-table' },
          h('thead', {}, h('tr', {}, h('th', {}, 'item'), h('th', {}, 'state'), h('th', {}, 'attempt'), h('th', {}, 'ran for'), h('th', {}, 'error'))),
          h('tbody', {}, ...page.items.map((item) => h('tr', { dataset: { item: String(item.item) } },
            h('td', {}, String(item.item)),
            h('td', {}, h('span', { class: `badge state-${item.state.toLowerCase()}` }, item.state.toLowerCase())),
            h('td', {}, attempt(item)),
            h('td', {}, item.started_at ? duration(item.started_at, item.finished_at) : '–'),
            h('td', { class: 'error-text' }, item.redacted && item.state === 'FAILED' ? 'redacted' : (item.error || '').split('\n')[0]))))),
        h('p', {},
          itemsStart > 0 ? h('button', { type: 'button', onclick: () => { itemsStart = Math.max(0, itemsStart - ITEMS_PAGE); itemsKey = null; draw(); } }, '← Previous') : null,
          page.next_start !== null && page.next_start !== undefined
            ? h('button', { type: 'button', id: 'items-next', onclick: () => { itemsStart = page.next_start; itemsKey = null; draw(); } }, 'Next →') : null));
    } catch (err) {
      if (itemsKey === key) itemsKey = null;
      notify(err);
    }
  }

  /** Read the selected node's logs again when its attempt or state moved (a report
   * stores them); a failure to read them leaves the pane as it was. */
  async function refreshLogs(task) {
    const key = `${task.node_id}|${task.attempt}|${task.state}`;
    if (key === logsKey) return;
    logsKey = key;
    mount(logsPane);
    try {
      const answer = await get(`/v1/runs/${encodeURIComponent(runId)}/logs?node=${encodeURIComponent(task.node_id)}`);
      if (!stopped && logsKey === key) mount(logsPane, logsBlock(answer));
    } catch (err) {
      if (logsKey === key) logsKey = null;
      notify(err);
    }
  }

  function drawActions(tasks, terminal, paused) {
    if (!session.can('operator')) {
      mount(nodeActions);
      mount(runActions);
      return;
    }
    mount(nodeActions, selected ? retryForm(terminal) : null);
    const waiting = [...tasks.values()].find((t) => t.state === 'WAITING' && t.awaited_signal);
    mount(runActions, terminal ? null : h('div', { class: 'card actions' },
      pauseForm(paused), cancelForm(), signalForm(waiting ? waiting.awaited_signal : '')));
  }

  function retryForm(terminal) {
    const input = h('textarea', {
      id: 'retry-input', rows: 3, placeholder: 'new run input as JSON (empty: keep the run’s input)',
      'aria-label': 'new run input',
    });
    const form = h('form', { class: 'retry', id: 'retry-form' },
      h('h3', {}, `Retry from ${selected}`),
      h('p', { class: 'muted' }, terminal
        ? 'This node and everything after it run again.'
        : 'Retry is possible once the run has finished.'),
      input,
      h('button', { type: 'submit', id: 'retry', class: 'primary', disabled: !terminal }, `Retry from ${selected}`));
    form.addEventListener('submit', (ev) => {
      ev.preventDefault();
      act(async () => {
        const body = { from_node: selected };
        const newInput = parseJsonInput(input.value, 'The new input');
        if (newInput !== undefined) body.input = newInput;
        await post(`/v1/runs/${encodeURIComponent(runId)}/retry`, body);
        input.value = '';
        return `Retrying from ${body.from_node}.`;
      });
    });
    return form;
  }

  // PAUSED is no end: nothing new goes to a worker until Resume; cancel still works
  function pauseForm(paused) {
    const reason = paused ? null
      : h('input', { id: 'pause-reason', placeholder: 'reason (optional)', 'aria-label': 'pause reason' });
    const form = h('form', { class: 'inline', id: 'pause-form' },
      h('h3', {}, paused ? 'Paused' : 'Pause'),
      h('p', { class: 'muted' }, paused
        ? 'Nothing new goes to a worker; timers and signals are kept until it is resumed.'
        : 'Running tasks finish; nothing new goes to a worker until it is resumed.'),
      reason,
      paused
        ? h('button', { type: 'submit', id: 'resume', class: 'primary' }, 'Resume run')
        : h('button', { type: 'submit', id: 'pause' }, 'Pause run'));
    form.addEventListener('submit', (ev) => {
      ev.preventDefault();
      act(async () => {
        const path = `/v1/runs/${encodeURIComponent(runId)}/${paused ? 'resume' : 'pause'}`;
        await post(path, reason && reason.value ? { reason: reason.value } : {});
        return paused ? 'Run resumed.' : 'Run paused.';
      });
    });
    return form;
  }

  function cancelForm() {
    const reason = h('input', { id: 'cancel-reason', placeholder: 'reason (optional)', 'aria-label': 'cancel reason' });
    const form = h('form', { class: 'inline', id: 'cancel-form' },
      h('h3', {}, 'Cancel'), reason, h('button', { type: 'submit', id: 'cancel', class: 'danger' }, 'Cancel run'));
    form.addEventListener('submit', (ev) => {
      ev.preventDefault();
      act(async () => {
        await post(`/v1/runs/${encodeURIComponent(runId)}/cancel`, reason.value ? { reason: reason.value } : {});
        return 'Run cancelled.';
      });
    });
    return form;
  }

  function signalForm(awaited) {
    const name = h('input', { id: 'signal-name', value: awaited, placeholder: 'signal name', required: true, 'aria-label': 'signal name' });
    const payload = h('textarea', { id: 'signal-payload', rows: 2, placeholder: 'payload as JSON (optional)', 'aria-label': 'signal payload' });
    const form = h('form', { class: 'inline', id: 'signal-form' },
      h('h3', {}, 'Send a signal'), name, payload, h('button', { type: 'submit', id: 'signal' }, 'Send signal'));
    form.addEventListener('submit', (ev) => {
      ev.preventDefault();
      act(async () => {
        const body = parseJsonInput(payload.value, 'The payload');
        const answer = await post(`/v1/runs/${encodeURIComponent(runId)}/signals/${encodeURIComponent(name.value.trim())}`, body);
        return answer.delivered ? `Signal ${name.value} delivered.` : `Signal ${name.value} buffered: no node waits for it yet.`;
      });
    });
    return form;
  }

  async function act(action) {
    try {
      const note = await action();
      notify(note, 'info');
      formsKey = null;
      await load();
    } catch (err) {
      notify(err);
    }
  }

  load();
  return () => {
    stopped = true;
    clearTimeout(timer);
  };
}
