// A run's history (GET /v1/runs/{id}/history) in words: the run page's
// Timeline tab and the attempts of the selected node. The phrases are the
// CLI's (`composer history`, libs/cli timeline.py), so both read alike.

import { h } from './dom.js';
import { clock, when } from './format.js';

const REDACTED = 'redacted';

function firstLine(value, entry) {
  if (value === undefined || value === null) return entry.redacted ? REDACTED : '';
  const lines = String(value).trim().split('\n');
  return lines[0] + (lines.length > 1 ? ' …' : '');
}

function took(ms) {
  if (ms === undefined || ms === null) return '';
  return ms < 1000 ? ` after ${Math.round(ms)} ms` : ` after ${(ms / 1000).toFixed(1)} s`;
}

function scheduled(d, error) {
  const until = d.wake_at ? when(d.wake_at) : '';
  if (d.state === 'WAITING' && d.signal) return `waiting for signal ${d.signal}${until ? ` (times out ${until})` : ''}`;
  if (d.state === 'WAITING') return until ? `sleeping until ${until}` : 'waiting';
  if (Array.isArray(d.branches)) return `${d.type} chose ${d.branches.join(', ') || 'no branch'}`;
  if (d.state === 'FAILED') return `${d.type} failed${error ? `: ${error}` : ''}`;
  if (d.state === 'COMPLETED' || d.state === 'SKIPPED') return `${d.type} ${d.state.toLowerCase()}`;
  // created and sent at once: one row says both (a dispatch of its own has its row)
  return `scheduled (${d.type})${d.queue ? `, dispatched to queue ${d.queue}` : ''}`;
}

/** One entry in words, e.g. "attempt 1 failed after 12 ms: ValueError: paid 5 of 21". */
export function describe(entry) {
  const d = entry.detail || {};
  const by = entry.actor ? ` by ${entry.actor}` : '';
  const error = firstLine(d.error, entry);
  // the API counts attempts from 0, as a task's; people count them from 1
  const a = entry.attempt === undefined || entry.attempt === null ? null : entry.attempt + 1;
  switch (entry.kind) {
    case 'run.started':
      return `run started${by} on v${d.version}${d.start_node ? ` from ${d.start_node}` : ''}`;
    case 'task.scheduled': return scheduled(d, error);
    case 'task.dispatched':
      return d.again ? `dispatched again to queue ${d.queue}: ${d.again}` : `dispatched to queue ${d.queue}`;
    case 'task.leased': return `attempt ${a} leased${by}`;
    case 'task.completed': return a ? `attempt ${a} completed${took(entry.duration_ms)}` : 'completed';
    case 'task.failed': {
      const head = a ? `attempt ${a} failed${took(entry.duration_ms)}` : 'failed';
      return error ? `${head}: ${error}` : head;
    }
    case 'task.retry_scheduled':
      return `attempt ${a} failed${took(entry.duration_ms)}: ${error}${d.retry_at ? `, retry at ${clock(d.retry_at)}` : ''}`;
    case 'task.cancelled': {
      const reason = firstLine(d.reason, entry) || error;
      return reason ? `cancelled: ${reason}` : 'cancelled';
    }
    case 'timer.fired': return 'timer fired';
    case 'signal.received': {
      const kept = d.paused ? ' (kept: the run is paused)' : d.buffered ? ' (buffered: no node waits for it yet)' : '';
      return `signal ${d.name} received${by}${kept}`;
    }
    case 'task.held': return `held: ${d.reason}`;
    case 'task.released': return `released to queue ${d.queue}`;
    case 'run.paused': {
      const reason = firstLine(d.reason, entry);
      return `run paused${by}${reason ? `: ${reason}` : ''}`;
    }
    case 'run.resumed': return `run resumed${by}`;
    case 'signal.consumed': return `took signal ${d.name}`;
    case 'run.cancelled': {
      const reason = firstLine(d.reason, entry);
      return `run cancelled${by}${reason ? `: ${reason}` : ''}`;
    }
    case 'run.retried':
      return `run retried from ${d.from_node}${by}${d.version !== undefined ? ` on v${d.version}` : ''}`;
    case 'run.finished':
      return `run ${String(d.status || '').toLowerCase()}${error ? `: ${error}` : ''}`;
    default: return entry.kind;
  }
}

const KIND_CLASS = {
  'task.completed': 'ok', 'task.failed': 'bad', 'task.retry_scheduled': 'warn', 'task.cancelled': 'warn',
  'run.cancelled': 'warn', 'run.paused': 'warn', 'run.resumed': 'strong', 'run.finished': 'strong', 'run.started': 'strong', 'run.retried': 'strong',
};

function time(iso) {
  return clock(iso, true);
}

/** The Timeline tab: every entry, oldest first; a node's rows select it. */
export function timelineTable(entries, onSelect) {
  if (!entries.length) return h('p', { class: 'muted' }, 'Nothing recorded for this run yet.');
  return h('table', { class: 'timeline', id: 'timeline' },
    h('thead', {}, h('tr', {}, h('th', {}, 'time'), h('th', {}, 'node'), h('th', {}, 'what'))),
    h('tbody', {}, ...entries.map((e) => h('tr', { class: `kind-${KIND_CLASS[e.kind] || 'plain'}`, dataset: { kind: e.kind } },
      h('td', { class: 'mono muted', title: e.at }, time(e.at)),
      h('td', { class: 'mono' }, e.node_id
        ? h('a', { href: '#', onclick: (ev) => { ev.preventDefault(); onSelect(e.node_id); } }, e.node_id) : ''),
      h('td', {}, describe(e))))));
}

/** The selected node's attempts, every one with its outcome, error and duration. */
export function attemptsBlock(entries, nodeId) {
  const ends = entries.filter((e) => e.node_id === nodeId
    && ['task.completed', 'task.failed', 'task.retry_scheduled', 'task.cancelled'].includes(e.kind) && e.attempt !== null && e.attempt !== undefined);
  if (!ends.length) return null;
  return h('section', { class: 'block', id: 'node-attempts' }, h('h3', {}, `Attempts (${ends.length})`),
    h('ol', { class: 'attempt-list' }, ...ends.map((e) => h('li', { class: `kind-${KIND_CLASS[e.kind] || 'plain'}` },
      h('span', { class: 'muted' }, `${time(e.at)} `), describe(e)))));
}
