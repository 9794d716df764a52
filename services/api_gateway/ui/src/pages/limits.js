// Limits: the keys that hold work back right now — a workflow's runs per key (its
// concurrency) and the attempts of nodes naming a concurrency key — each with how
// many are going, the limit and how many wait, refreshed live. A run key is rendered
// from run inputs, so a viewer sees it hidden unless the workflow shows payloads.

import { get } from '../api.js';
import { h, mount } from '../dom.js';
import { notify } from '../message.js';

const REFRESH_MS = 3000;

function keyCell(item) {
  if (item.redacted) return h('td', { class: 'muted' }, 'hidden');
  if (item.key === '') return h('td', { class: 'muted' }, 'one key');
  return h('td', { class: 'mono' }, item.key);
}

export function limitsPage(main) {
  let timer = null;
  let stopped = false;
  const body = h('tbody');
  mount(main, h('h1', {}, 'Limits'),
    h('p', { class: 'muted' },
      'Keys with work going or waiting. Runs: a workflow\'s concurrency (at most max_runs runs '
      + 'of a key started and not finished). Attempts: a node\'s concurrency key (at most max '
      + 'attempts with a worker or on their way to one). A waiting run or task says why on its page.'),
    h('table', { id: 'limits' },
      h('thead', {}, h('tr', {}, ['Workflow', 'Key', 'Limits', 'In use', 'Waiting']
        .map((c) => h('th', {}, c)))),
      body));

  async function load() {
    clearTimeout(timer);
    try {
      const { limits } = await get('/v1/limits');
      if (stopped) return;
      mount(body, limits.length ? limits.map((item) => h('tr', {
        dataset: { kind: item.kind, workflow: item.workflow_id || '', key: item.key || '' },
        class: item.waiting ? 'full' : '',
      },
      h('td', {}, item.workflow_id
        ? h('a', { href: `#/workflows/${encodeURIComponent(item.workflow_id)}` }, item.workflow_id)
        : h('span', { class: 'muted' }, 'global')),
      keyCell(item),
      h('td', {}, item.kind === 'run_concurrency' ? 'runs'
        : item.kind === 'node_concurrency' ? 'attempts' : `tokens per ${item.per_seconds} s`),
      h('td', { class: 'in-use' }, `${item.in_use} / ${item.limit ?? '?'}`),
      h('td', { class: 'waiting' }, String(item.waiting))))
        : h('tr', {}, h('td', { colspan: 5, class: 'empty' }, 'No limited key has work going or waiting.')));
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
