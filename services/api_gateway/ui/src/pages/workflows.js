// Workflows: every definition with its versions, which one is deployed, a
// read-only graph preview of a version and a diff between two versions'
// YAML. An admin may deploy a version; an operator may start a run.

import { diffLines } from 'diff';
import { stringify } from 'yaml';
import { get, parseJsonInput, post, session } from '../api.js';
import { h, mount } from '../dom.js';
import { when } from '../format.js';
import { drawGraph, graphViewer } from '../graph.js';
import { notify } from '../message.js';

export function workflowsPage(main) {
  const body = h('tbody');
  mount(main, h('h1', {}, 'Workflows'),
    h('table', { id: 'workflows' },
      h('thead', {}, h('tr', {}, ['Workflow', 'Name', 'Versions', 'Deployed', 'Updated'].map((c) => h('th', {}, c)))),
      body));
  get('/v1/workflows').then(({ workflows }) => {
    mount(body, workflows.length ? workflows.map((wf) => h('tr', { dataset: { workflow: wf.id } },
      h('td', {}, h('a', { href: `#/workflows/${encodeURIComponent(wf.id)}` }, wf.id)),
      h('td', {}, wf.name),
      h('td', {}, String(wf.latest_version)),
      h('td', {}, wf.deployed_version ? `v${wf.deployed_version}` : h('span', { class: 'muted' }, 'none')),
      h('td', {}, when(wf.updated_at))))
      : h('tr', {}, h('td', { colspan: 5, class: 'empty' }, 'No workflows yet: `composer apply -f wf.yaml --deploy`.')));
  }).catch(notify);
  return () => {};
}

export function workflowPage(main, workflowId, params) {
  const specs = new Map(); // version → spec
  let detail = null;
  let shown = Number(params.get('version')) || null;
  const base = `/v1/workflows/${encodeURIComponent(workflowId)}`;

  const versions = h('tbody');
  const preview = graphViewer('preview');
  const previewTitle = h('h2', {});
  const previewActions = h('div', { class: 'preview-actions' });
  const fromSelect = h('select', { id: 'diff-from', 'aria-label': 'diff from version' });
  const toSelect = h('select', { id: 'diff-to', 'aria-label': 'diff to version' });
  const diffOut = h('pre', { class: 'diff', id: 'diff' });
  fromSelect.addEventListener('change', showDiff);
  toSelect.addEventListener('change', showDiff);

  mount(main,
    h('p', { class: 'crumbs' }, h('a', { href: '#/workflows' }, '← Workflows')),
    h('h1', {}, workflowId),
    h('table', { id: 'versions' },
      h('thead', {}, h('tr', {}, ['Version', 'Name', 'Created', 'By', 'Deployed', ''].map((c) => h('th', {}, c)))),
      versions),
    h('section', { class: 'card' }, previewTitle, preview.element, previewActions),
    h('section', { class: 'card' }, h('h2', {}, 'Diff'),
      h('p', {}, 'From ', fromSelect, ' to ', toSelect, h('span', { class: 'muted' }, ' (the definitions as YAML)')),
      diffOut));

  async function spec(version) {
    if (!specs.has(version)) specs.set(version, (await get(`${base}/versions/${version}`)).spec);
    return specs.get(version);
  }

  async function load() {
    try {
      detail = await get(base);
    } catch (err) {
      notify(err);
      return;
    }
    if (!shown) shown = detail.deployed_version || detail.latest_version;
    drawVersions();
    const numbers = detail.versions.map((v) => v.version);
    const options = (select, pick) => mount(select, numbers.map((n) => h('option', { value: n, selected: n === pick }, `v${n}`)));
    const latest = detail.latest_version;
    options(fromSelect, numbers.includes(latest - 1) ? latest - 1 : latest);
    options(toSelect, latest);
    await Promise.all([showPreview(), showDiff()]);
  }

  function drawVersions() {
    mount(versions, detail.versions.map((v) => h('tr', { class: v.version === shown ? 'selected' : '', dataset: { version: v.version } },
      h('td', {}, h('a', { href: '#', onclick: (ev) => { ev.preventDefault(); shown = v.version; drawVersions(); showPreview(); } }, `v${v.version}`)),
      h('td', {}, v.name),
      h('td', {}, when(v.created_at)),
      h('td', {}, v.created_by || ''),
      h('td', {}, v.deployed ? h('span', { class: 'badge status-succeeded deployed' }, 'deployed') : ''),
      h('td', {}, session.can('admin') && !v.deployed
        ? h('button', { type: 'button', class: 'deploy', onclick: () => deploy(v.version) }, 'Deploy') : ''))));
  }

  async function deploy(version) {
    try {
      await post(`${base}/versions/${version}/deploy`);
      notify(`v${version} of ${workflowId} is now deployed.`, 'info');
      await load();
    } catch (err) {
      notify(err);
    }
  }

  async function showPreview() {
    try {
      const s = await spec(shown);
      mount(previewTitle, `Version ${shown}`, h('span', { class: 'muted' }, ' — read-only preview'));
      preview.show(drawGraph(s, { preview: true, available: preview.available() }));
      mount(previewActions, session.can('operator') && detail.deployed_version === shown ? startForm(s) : null);
    } catch (err) {
      notify(err);
    }
  }

  // The start form. A version with an input_schema lists the schema's fields (name,
  // type, required, description) above the input and offers a skeleton of them; a
  // start the schema refuses (400 input-invalid) lists each problem at its JSON path
  // under the form.
  function startForm(s) {
    const schema = s && s.input_schema && typeof s.input_schema === 'object' ? s.input_schema : null;
    const fields = schemaFields(schema);
    const skeleton = fields.length ? JSON.stringify(Object.fromEntries(fields.map((f) => [f.name, f.example]))) : '';
    const input = h('textarea', {
      id: 'start-input',
      rows: 3,
      placeholder: skeleton ? `run input as JSON, e.g. ${skeleton}` : 'run input as JSON (optional)',
      'aria-label': 'run input',
    });
    const problems = h('ul', { id: 'start-problems', class: 'problems', hidden: true });
    const form = h('form', { class: 'inline', id: 'start-form' },
      h('h3', {}, 'Start a run of the deployed version'),
      fields.length ? inputFields(fields, schema, () => { input.value = JSON.stringify(Object.fromEntries(fields.map((f) => [f.name, f.example])), null, 2); input.focus(); }) : null,
      input, h('button', { type: 'submit', class: 'primary', id: 'start' }, 'Start run'), problems);
    form.addEventListener('submit', async (ev) => {
      ev.preventDefault();
      mount(problems);
      problems.hidden = true;
      try {
        const body = { workflow_id: workflowId };
        const value = parseJsonInput(input.value, 'The input');
        if (value !== undefined) body.input = value;
        const started = await post('/v1/runs', body);
        location.hash = `#/runs/${started.run_id}`;
      } catch (err) {
        const listed = err && err.problem && Array.isArray(err.problem.problems) ? err.problem.problems : [];
        if (listed.length) {
          mount(problems, listed.map((p) => h('li', {}, h('code', {}, p.path || '$'), ' ', p.message)));
          problems.hidden = false;
        }
        notify(err);
      }
    });
    return form;
  }

  async function showDiff() {
    const a = Number(fromSelect.value);
    const b = Number(toSelect.value);
    if (!a || !b) return;
    try {
      const [left, right] = await Promise.all([spec(a), spec(b)]);
      const parts = diffLines(stringify(left), stringify(right));
      const lines = [];
      for (const part of parts) {
        const kind = part.added ? 'added' : part.removed ? 'removed' : 'same';
        const mark = part.added ? '+ ' : part.removed ? '- ' : '  ';
        for (const line of part.value.replace(/\n$/, '').split('\n')) {
          lines.push(h('span', { class: `line ${kind}` }, mark + line));
        }
      }
      const changed = parts.some((p) => p.added || p.removed);
      mount(diffOut, changed ? lines : h('span', { class: 'line same' }, `v${a} and v${b} are the same.`));
    } catch (err) {
      notify(err);
    }
  }

  load();
  return () => {};
}

// The top-level properties of an input schema, as the start form lists them.
function schemaFields(schema) {
  if (!schema || typeof schema.properties !== 'object' || !schema.properties) return [];
  const order = Array.isArray(schema.required) ? schema.required : [];
  const required = new Set(order);
  // the stored document keeps no key order (PostgreSQL's jsonb): the required fields
  // come first, in the order `required` lists them, then the others by name
  const rank = (name) => (required.has(name) ? order.indexOf(name) : order.length);
  const entries = Object.entries(schema.properties)
    .sort(([a], [b]) => rank(a) - rank(b) || (a < b ? -1 : a > b ? 1 : 0));
  return entries.map(([name, prop]) => {
    const p = prop && typeof prop === 'object' ? prop : {};
    const type = Array.isArray(p.type) ? p.type.join(' | ') : p.type || (p.enum ? 'one of' : p.$ref ? 'see schema' : 'any');
    return {
      name,
      type: p.enum ? `${type} (${p.enum.map((e) => JSON.stringify(e)).join(', ')})` : type,
      required: required.has(name),
      description: p.description || p.title || '',
      example: 'default' in p ? p.default : exampleOf(Array.isArray(p.type) ? p.type[0] : p.type, p),
    };
  });
}

function exampleOf(type, p) {
  if (p.enum && p.enum.length) return p.enum[0];
  if ('const' in p) return p.const;
  return { string: '', integer: 0, number: 0, boolean: false, array: [], object: {}, null: null }[type] ?? null;
}

function inputFields(fields, schema, fill) {
  return h('div', { id: 'start-schema', class: 'schema-hint' },
    h('p', { class: 'muted' }, schema.description || 'The input this version takes (its input_schema):'),
    h('table', { class: 'fields' },
      h('thead', {}, h('tr', {}, ['Field', 'Type', '', 'Description'].map((c) => h('th', {}, c)))),
      h('tbody', {}, fields.map((f) => h('tr', { dataset: { field: f.name } },
        h('td', {}, h('code', {}, f.name)),
        h('td', {}, f.type),
        h('td', {}, f.required ? h('span', { class: 'badge required' }, 'required') : h('span', { class: 'muted' }, 'optional')),
        h('td', {}, f.description))))),
    h('button', { type: 'button', id: 'start-skeleton', onclick: fill }, 'Fill in the fields'));
}
