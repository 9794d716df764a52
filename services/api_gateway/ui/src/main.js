// The shell: sign-in, the navigation, the message bar and a hash router
// (#/runs, #/runs/<id>, #/workflows, #/workflows/<id>, #/schedules, #/schedules/<id>,
// #/workers, #/limits). Each page is a
// function that draws into the main element and returns a function that
// stops whatever it left running (refresh timers).

import { get, session } from './api.js';
import { h, mount } from './dom.js';
import { notify } from './message.js';
import { runsPage } from './pages/runs.js';
import { runPage } from './pages/run.js';
import { workflowsPage, workflowPage } from './pages/workflows.js';
import { limitsPage } from './pages/limits.js';
import { schedulePage, schedulesPage } from './pages/schedules.js';
import { workersPage } from './pages/workers.js';

const main = document.getElementById('main');
const nav = document.getElementById('nav');
let dispose = () => {};

function signOut(reason) {
  session.token = null;
  session.role = null;
  session.name = null;
  route(reason);
}

function showSignIn(reason) {
  nav.hidden = true;
  const input = h('input', {
    id: 'token', type: 'password', autocomplete: 'off', required: true,
    placeholder: 'paste an API token', 'aria-label': 'API token',
  });
  const remember = h('input', { id: 'remember', type: 'checkbox' });
  const error = h('p', { id: 'signin-error', class: 'signin-error', role: 'alert', hidden: !reason }, reason || '');
  const form = h('form', { class: 'signin card', id: 'signin' },
    h('h1', {}, 'Sign in to Composer'),
    h('p', {}, 'Paste an API token (COMPOSER_API_TOKENS on the api-gateway; `make run` prints it and keeps it in .state/tokens.env). ',
      'It is kept in this tab’s session storage, unless you ask to be remembered.'),
    input,
    h('label', { class: 'remember' }, remember,
      ' Remember me in this browser (every tab, until you sign out)'),
    h('button', { type: 'submit', class: 'primary' }, 'Sign in'),
    error);
  form.addEventListener('submit', async (ev) => {
    ev.preventDefault();
    session.remember = remember.checked;
    session.token = input.value.trim();
    try {
      ({ role: session.role, name: session.name } = await get('/v1/whoami'));
    } catch (err) {
      session.token = null;
      error.textContent = err.status === 401
        ? `That token was refused: ${err.problem.detail || 'unknown API token'}`
        : err.message;
      error.hidden = false;
      return;
    }
    // The page the address names (a run's link, say) is the one to open; no page: the runs.
    if (!location.hash || location.hash === '#/') history.replaceState(null, '', '#/runs');
    route();
  });
  mount(main, form);
  input.focus();
}

function drawNav() {
  nav.hidden = false;
  const page = ['workflows', 'schedules', 'workers', 'limits'].find((p) => location.hash.startsWith(`#/${p}`)) || 'runs';
  mount(nav,
    h('a', { class: 'brand', href: '#/runs' }, 'Composer'),
    h('a', { href: '#/runs', class: page === 'runs' ? 'active' : '' }, 'Runs'),
    h('a', { href: '#/workflows', class: page === 'workflows' ? 'active' : '' }, 'Workflows'),
    h('a', { href: '#/schedules', class: page === 'schedules' ? 'active' : '' }, 'Schedules'),
    h('a', { href: '#/workers', class: page === 'workers' ? 'active' : '' }, 'Workers'),
    h('a', { href: '#/limits', class: page === 'limits' ? 'active' : '' }, 'Limits'),
    h('span', { class: 'spacer' }),
    h('span', { class: 'token-name', id: 'token-name', title: 'the name of this token' }, session.name || ''),
    h('span', { class: `role role-${session.role}`, id: 'role', title: 'the role of this token' }, session.role),
    h('button', { type: 'button', id: 'signout', onclick: () => signOut() }, 'Sign out'));
}

async function route(reason) {
  dispose();
  dispose = () => {};
  if (!session.token) {
    showSignIn(reason);
    return;
  }
  if (!session.role) {
    try {
      ({ role: session.role, name: session.name } = await get('/v1/whoami'));
    } catch (err) {
      if (err.status === 401) {
        session.token = null;
        showSignIn(`That token was refused: ${err.problem.detail || 'unknown API token'}`);
      } else {
        mount(main, h('p', { class: 'empty' }, 'Could not reach the API.'));
        notify(err);
      }
      return;
    }
  }
  drawNav();
  const [path, search] = location.hash.replace(/^#/, '').split('?');
  const params = new URLSearchParams(search || '');
  const parts = path.split('/').filter(Boolean).map(decodeURIComponent);
  mount(main);
  if (parts[0] === 'runs' && parts[1]) dispose = runPage(main, parts[1]);
  else if (parts[0] === 'workflows' && parts[1]) dispose = workflowPage(main, parts[1], params);
  else if (parts[0] === 'workflows') dispose = workflowsPage(main);
  else if (parts[0] === 'schedules' && parts[1]) dispose = schedulePage(main, parts[1]);
  else if (parts[0] === 'schedules') dispose = schedulesPage(main);
  else if (parts[0] === 'workers') dispose = workersPage(main);
  else if (parts[0] === 'limits') dispose = limitsPage(main);
  else dispose = runsPage(main, params);
}

window.addEventListener('composer-unauthorized', (ev) => signOut(ev.detail));
window.addEventListener('hashchange', () => {
  notify(null);
  route();
});
route();
