// Workers: every SDK worker that beat to the coordinator in the last day, the
// queues it serves, how busy it is and when it was last seen, refreshed live.
// LOST: no beat within the API's COMPOSER_WORKER_LIVE_SECONDS; STOPPED: it
// stopped on purpose.

import { get } from '../api.js';
import { h, mount } from '../dom.js';
import { when } from '../format.js';
import { notify } from '../message.js';

const REFRESH_MS = 3000;

/** "4 s ago", "3 min ago", "2 h ago". */
function ago(seconds) {
  const s = Math.max(0, Math.floor(seconds));
  if (s < 60) return `${s} s ago`;
  if (s < 3600) return `${Math.floor(s / 60)} min ago`;
  return `${Math.floor(s / 3600)} h ago`;
}

export function workersPage(main) {
  let timer = null;
  let stopped = false;
  const body = h('tbody');
  const note = h('p', { class: 'muted', id: 'workers-note' });
  mount(main, h('h1', {}, 'Workers'), note,
    h('table', { id: 'workers' },
      h('thead', {}, h('tr', {}, ['Worker', 'Queues', 'Status', 'Last seen', 'Busy', 'Host', 'SDK', 'Started']
        .map((c) => h('th', {}, c)))),
      body));

  async function load() {
    clearTimeout(timer);
    try {
      const { workers, live_seconds: live } = await get('/v1/workers');
      if (stopped) return;
      note.textContent = `From the workers' heartbeats: a worker silent for more than ${live} s is lost; `
        + 'one that stopped on purpose says so. A task whose queue no live worker serves says so on its run.';
      mount(body, workers.length ? workers.map((w) => h('tr', { dataset: { worker: w.worker_id }, class: w.live ? '' : 'gone' },
        h('td', { class: 'mono' }, w.worker_id),
        h('td', { class: 'queues' }, w.queues.length ? w.queues.map((q) => h('code', { class: 'queue' }, q)) : '—'),
        h('td', {}, h('span', { class: `badge worker-${w.status.toLowerCase()}` }, w.status.toLowerCase())),
        h('td', { title: when(w.last_seen_at) }, ago(w.last_seen_seconds_ago)),
        h('td', { class: 'busy', title: 'tasks held / concurrency' }, `${w.in_flight} / ${w.concurrency}`),
        h('td', {}, w.host),
        h('td', { class: 'muted' }, w.sdk_version),
        h('td', {}, when(w.started_at))))
        : h('tr', {}, h('td', { colspan: 8, class: 'empty' },
          'No worker has sent a heartbeat in the last day: start one (`make run` starts the built-in ones).')));
    } catch (err) {
      if (stopped) return;
      notify(err);
    }
    if (!stopped) timer = setTimeout(load, REFRESH_MS);
  }

  load();
  return () => {
    stopped = true;
    clearTimeout(timer);
  };
}
