// Schedules: every schedule (when it fires, paused or its next fire, fires started,
// skipped and missed), and one schedule's page: its next five fire times, its last
// runs, what happened lately (skipped and missed fires among it) and its backfills,
// with Pause / Resume / Trigger now for operators. Both refresh live.

import { get, post, query, session } from '../api.js';
import { h, mount } from '../dom.js';
import { when } from '../format.js';
import { notify } from '../message.js';
import { badge } from './runs.js';

const REFRESH_MS = 3000;

/** When it fires: "cron 0 2 * * * (Europe/Berlin)" or "every 30 s". */
export function firesText(s) {
  if (s.cron) return `cron ${s.cron}${s.timezone && s.timezone !== 'UTC' ? ` (${s.timezone})` : ''}`;
  return `every ${s.every_seconds} s`;
}

/** A time in the schedule's own zone, "Thu 3 Dec, 02:00:00 Europe/Berlin"; '' for UTC. */
function zoned(iso, timezone) {
  if (!iso || !timezone || timezone === 'UTC') return '';
  try {
    const text = new Date(iso).toLocaleString(undefined, {
      timeZone: timezone, weekday: 'short', day: 'numeric', month: 'short',
      hour: '2-digit', minute: '2-digit', second: '2-digit', hourCycle: 'h23',
    });
    return `${text} ${timezone}`;
  } catch {
    return '';
  }
}

const scheduleHref = (id) => `#/schedules/${encodeURIComponent(id)}`;
const runHref = (id) => `#/runs/${encodeURIComponent(id)}`;

function refreshing(load) {
  let timer = null;
  let stopped = false;
  async function tick() {
    clearTimeout(timer);
    try {
      await load(() => stopped);
    } catch (err) {
      if (stopped) return;
      notify(err);
      if (err.status === 404) return;
    }
    if (!stopped) timer = setTimeout(tick, REFRESH_MS);
  }
  tick();
  return { stop: () => { stopped = true; clearTimeout(timer); }, now: tick };
}

export function schedulesPage(main) {
  const body = h('tbody');
  mount(main, h('h1', {}, 'Schedules'),
    h('p', { class: 'muted' },
      'Schedules start runs of a workflow at cron or interval fire times: a definition\'s schedules:, '
      + 'or POST /v1/schedules (composer schedules create). The timer service fires them. '
      + 'Skipped: a fire held back by the overlap policy; missed: a fire older than the catch-up window.'),
    h('table', { id: 'schedules' },
      h('thead', {}, h('tr', {}, ['Schedule', 'Workflow', 'Fires', 'Next fire', 'Started', 'Skipped', 'Missed']
        .map((c) => h('th', {}, c)))),
      body));
  const loop = refreshing(async (stopped) => {
    const { schedules } = await get('/v1/schedules');
    if (stopped()) return;
    mount(body, schedules.length ? schedules.map((s) => h('tr', { dataset: { schedule: s.id } },
      h('td', {}, h('a', { href: scheduleHref(s.id) }, s.id)),
      h('td', {}, h('a', { href: `#/workflows/${encodeURIComponent(s.workflow_id)}` }, s.workflow_id)),
      h('td', { class: 'mono fires' }, firesText(s)),
      h('td', { class: 'next' }, s.paused ? h('span', { class: 'badge status-paused' }, 'paused') : when(s.next_fire_at)),
      h('td', { class: 'fired' }, String(s.fired)),
      h('td', { class: 'skipped' }, String(s.skipped)),
      h('td', { class: 'missed' }, String(s.missed))))
      : h('tr', {}, h('td', { colspan: 7, class: 'empty' }, 'No schedules yet.')));
  });
  return loop.stop;
}

function field(label, value, cls) {
  return value === undefined || value === null || value === '' ? null
    : [h('dt', {}, label), h('dd', { class: cls }, value)];
}

export function schedulePage(main, scheduleId) {
  const head = h('div', { class: 'schedule-head' });
  const actions = h('div', { id: 'schedule-actions' });
  const fires = h('section', { class: 'card', id: 'next-fires' });
  const runs = h('section', { class: 'card', id: 'schedule-runs' });
  const events = h('section', { class: 'card', id: 'schedule-events' });
  const backfills = h('section', { class: 'card', id: 'schedule-backfills' });
  mount(main, h('p', { class: 'crumbs' }, h('a', { href: '#/schedules' }, '← Schedules')),
    head, actions, fires, runs, events, backfills);
  let actionsKey = null;

  const loop = refreshing(async (stopped) => {
    const s = await get(`/v1/schedules/${encodeURIComponent(scheduleId)}`);
    const listing = await get(`/v1/runs${query({ schedule_id: scheduleId, limit: 10 })}`);
    if (stopped()) return;
    draw(s, listing.runs);
  });

  function draw(s, lastRuns) {
    mount(head,
      h('h1', {}, 'Schedule ', h('span', { class: 'mono', id: 'schedule-id' }, s.id), ' ',
        s.paused ? h('span', { class: 'badge status-paused', id: 'schedule-state' }, 'paused')
          : h('span', { class: 'badge status-running', id: 'schedule-state' }, 'active')),
      h('dl', { class: 'meta' },
        field('workflow', h('a', { href: `#/workflows/${encodeURIComponent(s.workflow_id)}` }, s.workflow_id)),
        field('fires', firesText(s), 'mono'),
        field('overlap', s.overlap),
        field('catch-up', `${s.catchup_window_seconds} s`),
        field('jitter', s.jitter_seconds ? `${s.jitter_seconds} s` : null),
        field('from', s.source === 'definition' ? 'its workflow\'s definition' : 'the API'),
        field('created by', s.created_by),
        field('started', String(s.fired), 'fired'),
        field('skipped', String(s.skipped), 'skipped'),
        field('missed', String(s.missed), 'missed'),
        field('buffered for', s.buffered_for ? when(s.buffered_for) : null),
        field('input', s.redacted ? h('span', { class: 'muted redacted' }, 'redacted')
          : h('code', {}, JSON.stringify(s.input)))));
    const key = `${s.paused}|${session.role}`;
    if (key !== actionsKey) {
      actionsKey = key;
      mount(actions, session.can('operator') ? actionButtons(s) : null);
    }
    mount(fires, h('h2', {}, 'Next fire times'),
      s.next_fires && s.next_fires.length
        ? h('ol', { id: 'next-fires-list' }, ...s.next_fires.map((f) => h('li', {}, when(f),
          zoned(f, s.timezone) ? h('span', { class: 'muted' }, ` · ${zoned(f, s.timezone)}`) : null)))
        : h('p', { class: 'muted' }, 'None: the schedule is paused.'));
    mount(runs, h('h2', {}, 'Last runs'),
      lastRuns.length ? h('table', { id: 'schedule-runs-table' },
        h('thead', {}, h('tr', {}, ['Run', 'Status', 'Created'].map((c) => h('th', {}, c)))),
        h('tbody', {}, ...lastRuns.map((r) => h('tr', { dataset: { run: r.run_id } },
          h('td', {}, h('a', { href: runHref(r.run_id), class: 'mono' }, r.run_id)),
          h('td', {}, badge(r.status)),
          h('td', {}, when(r.created_at))))))
        : h('p', { class: 'muted' }, 'No runs yet.'));
    mount(events, h('h2', {}, 'Events'),
      h('p', { class: 'muted' }, 'Newest first. skipped: the overlap policy held a fire back; missed: fires older than the catch-up window were not started.'),
      s.events.length ? h('table', { id: 'schedule-events-table' },
        h('thead', {}, h('tr', {}, ['When', 'Event', 'Fire time', 'Run', 'By', 'Detail'].map((c) => h('th', {}, c)))),
        h('tbody', {}, ...s.events.map((e) => h('tr', { dataset: { kind: e.kind }, class: `event-${e.kind}` },
          h('td', {}, when(e.at)),
          h('td', { class: 'kind' }, e.kind),
          h('td', {}, e.scheduled_for ? when(e.scheduled_for) : '—'),
          h('td', {}, e.run_id ? h('a', { href: runHref(e.run_id), class: 'mono' }, e.run_id) : '—'),
          h('td', {}, e.actor || '—'),
          h('td', { class: 'detail' }, e.detail || '')))))
        : h('p', { class: 'muted' }, 'Nothing yet.'));
    mount(backfills, h('h2', {}, 'Backfills'),
      s.backfills.length ? h('ul', { id: 'backfills-list' }, ...s.backfills.map((b) => h('li', { dataset: { backfill: b.id } },
        `${when(b.start)} to ${when(b.end)} (${b.overlap}): ${b.started} started, ${b.skipped} skipped of ${b.total}`,
        b.done ? ' · done' : ' · going')))
        : h('p', { class: 'muted' }, 'None.'));
  }

  function actionButtons(s) {
    const run = (path, note) => async () => {
      try {
        const answer = await post(`/v1/schedules/${encodeURIComponent(s.id)}/${path}`, {});
        if (path === 'trigger') {
          notify(answer.started ? `Started run ${answer.run_id}.` : `Not started: ${answer.detail}`, answer.started ? 'info' : 'error');
        } else {
          notify(note, 'info');
        }
        actionsKey = null;
        loop.now();
      } catch (err) {
        notify(err);
      }
    };
    return h('div', { class: 'card actions' },
      s.paused
        ? h('button', { type: 'button', id: 'schedule-resume', class: 'primary', onclick: run('resume', 'Schedule resumed.') }, 'Resume')
        : h('button', { type: 'button', id: 'schedule-pause', onclick: run('pause', 'Schedule paused.') }, 'Pause'),
      h('button', { type: 'button', id: 'schedule-trigger', onclick: run('trigger') }, 'Trigger now'));
  }

  return loop.stop;
}
