// The message bar: API errors as readable text, and short notes.

import { ApiError } from './api.js';
import { h, mount } from './dom.js';

/** Show an error (an ApiError's readable message) or a note; nothing clears the bar. */
export function notify(what, kind = 'error') {
  const bar = document.getElementById('message');
  if (!what) {
    bar.hidden = true;
    bar.replaceChildren();
    return;
  }
  const text = what instanceof Error ? what.message : String(what);
  bar.className = `message ${kind}`;
  mount(bar, h('span', { class: 'message-text' }, text),
    h('button', { class: 'close', type: 'button', 'aria-label': 'dismiss', onclick: () => notify(null) }, '×'));
  bar.hidden = false;
  if (what instanceof ApiError && what.status === 401) {
    window.dispatchEvent(new CustomEvent('composer-unauthorized', { detail: text }));
  }
}
