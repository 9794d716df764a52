// Formatting of times, durations and JSON for display.

export function when(iso) {
  if (!iso) return '—';
  const d = new Date(iso);
  return d.toLocaleString(undefined, {
    year: 'numeric', month: 'short', day: '2-digit',
    hour: '2-digit', minute: '2-digit', second: '2-digit',
  });
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
 * A CEL condition as shown on an edge: the template braces off, cut to `max`
 * characters from the front (the end, `… == 200`, tells two branches apart).
 */
export function condition(text, max = 24) {
  const bare = String(text).replace(/^\s*\{\{\s*/, '').replace(/\s*\}\}\s*$/, '');
  return bare.length > max ? `…${bare.slice(bare.length - max + 1)}` : bare;
}

/**
 * A task's attempt as people count it, from 1, with its node's allowance when
 * it has one ("2 of 3"): the API's `attempt` counts from 0; the CLI shows the same.
 */
export function attempt(task) {
  const shown = String(task.attempt + 1);
  return task.max_attempts ? `${shown} of ${task.max_attempts}` : shown;
}
