// Formatting of times, durations and JSON for display.
//
// One time format in the whole UI (issue 31 found 20:29:30 beside 8:29:31 PM in one
// table): the reader's local time on a 24-hour clock, HH:MM:SS, with the date before it
// where a day matters (`when`), milliseconds after it in a timeline (`clock(iso, true)`).

const CLOCK = { hour: '2-digit', minute: '2-digit', second: '2-digit', hourCycle: 'h23' };

/** "14:05:09" (local, 24-hour); with `ms`, "14:05:09.042". */
export function clock(iso, ms = false) {
  if (!iso) return '—';
  const d = iso instanceof Date ? iso : new Date(iso);
  const time = d.toLocaleTimeString(undefined, CLOCK);
  return ms ? `${time}.${String(d.getMilliseconds()).padStart(3, '0')}` : time;
}

/** "2 Dec 2026, 14:05:09": the date, then the clock. */
export function when(iso) {
  if (!iso) return '—';
  const d = iso instanceof Date ? iso : new Date(iso);
  const day = d.toLocaleDateString(undefined, { year: 'numeric', month: 'short', day: 'numeric' });
  return `${day}, ${clock(d)}`;
}

/** "1.2 s", "3 min 4 s", "2 h 5 min": from `start` to `end` (now when absent). */
export function duration(start, end) {
  if (!start) return '—';
  const ms = (end ? new Date(end) : new Date()) - new Date(start);
  if (ms < 0) return '—';
  if (ms < 1000) return `${ms} ms`;
  const s = ms / 1000;
  if (s < 60) return `${s.toFixed(1)} s`;
  const m = Math.floor(s / 60);
  if (m < 60) return `${m} min ${Math.floor(s % 60)} s`;
  const hours = Math.floor(m / 60);
  if (hours < 48) return `${hours} h ${m % 60} min`;
  return `${Math.floor(hours / 24)} d ${hours % 24} h`;
}

export function json(value) {
  return value === undefined ? '' : JSON.stringify(value, null, 2);
}

export function shortId(id) {
  return id && id.length > 13 ? `${id.slice(0, 8)}…${id.slice(-4)}` : id;
}

/**
 * A task's attempt as people count it, from 1, with its node's allowance when
 * it has one ("2 of 3"): the API's `attempt` counts from 0; the CLI shows the same.
 */
/** A MAP node's progress, its items finished of all ("37 / 100"); '' for other nodes. */
export function itemsProgress(task) {
  return task && task.items ? `${task.items.finished} / ${task.items.total}` : '';
}

export function attempt(task) {
  const shown = String(task.attempt + 1);
  return task.max_attempts ? `${shown} of ${task.max_attempts}` : shown;
}
