// The workflow graph: laid out left to right by dagre, drawn as SVG.
// Each node is coloured by its task's state (the CSS classes state-*), an
// edge with a condition (out of a SWITCH) shows it and whether the run took it.
// Nothing here names a node kind: what a node did is in its task (its recorded
// branches), so a new kind draws without a change here.

import { graphlib, layout } from '@dagrejs/dagre';
import { h, svg } from './dom.js';
import { attempt, condition } from './format.js';

export const STATES = ['PENDING', 'QUEUED', 'RUNNING', 'WAITING', 'COMPLETED', 'FAILED', 'SKIPPED', 'CANCELLED'];
const NODE_HEIGHT = 48;
const CHAR_WIDTH = 7.5;
const MIN_SCALE = 0.65;

/** The latest task of each node (a retried node may have had earlier ones). */
export function tasksByNode(tasks) {
  const out = new Map();
  for (const t of tasks || []) {
    const seen = out.get(t.node_id);
    if (!seen || seen.created_at <= t.created_at) out.set(t.node_id, t);
  }
  return out;
}

/**
 * How a run went along one edge: 'taken', 'not-taken' (its source recorded the
 * branches it selected, a SWITCH's, and this is not one), or ''.
 */
function decision(edge, tasks) {
  const source = tasks.get(edge.from);
  if (!source || source.state !== 'COMPLETED') return '';
  if (Array.isArray(source.branches)) {
    return source.branches.includes(edge.to) ? 'taken' : 'not-taken';
  }
  const target = tasks.get(edge.to);
  return target && target.state !== 'SKIPPED' ? 'taken' : '';
}

function edgeLabel(edge, how) {
  if (!edge.condition) return '';
  const mark = how === 'taken' ? '✓ ' : how === 'not-taken' ? '✗ ' : '';
  return mark + condition(edge.condition);
}

/**
 * Draw `spec` (a stored definition: nodes and edges) into an <svg>.
 * `tasks`: Map node_id → task (empty for a preview); `selected`: a node id;
 * `onSelect(nodeId)`: called when a node is clicked.
 */
export function drawGraph(spec, { tasks = new Map(), selected = null, onSelect = null, preview = false } = {}) {
  const nodes = spec.nodes || [];
  const edges = spec.edges || [];
  const g = new graphlib.Graph({ multigraph: true });
  g.setGraph({ rankdir: 'LR', nodesep: 28, ranksep: 48, edgesep: 14, marginx: 12, marginy: 12 });
  g.setDefaultEdgeLabel(() => ({}));
  for (const node of nodes) {
    const width = Math.max(112, Math.max(node.id.length, node.type.length + 12) * CHAR_WIDTH + 28);
    g.setNode(node.id, { width, height: NODE_HEIGHT });
  }
  edges.forEach((edge, i) => {
    const how = preview ? '' : decision(edge, tasks);
    const text = edgeLabel(edge, how);
    const label = { how, text, edge };
    if (text) Object.assign(label, { width: text.length * 6.6 + 10, height: 18, labelpos: 'c' });
    g.setEdge(edge.from, edge.to, label, String(i));
  });
  layout(g);
  const { width, height } = g.graph();

  const root = svg('svg', {
    class: 'graph',
    viewBox: `0 0 ${Math.ceil(width)} ${Math.ceil(height)}`,
    width: Math.ceil(width),
    height: Math.ceil(height),
    role: 'img',
    'aria-label': `graph of ${spec.id || 'the workflow'}`,
  });
  // fit the pane, but never below 65 % of the natural size: scroll past that
  root.style.minWidth = `${Math.ceil(width * MIN_SCALE)}px`;
  root.append(svg('defs', {}, ['plain', 'taken', 'not-taken'].map((kind) =>
    svg('marker', {
      id: `arrow-${kind}`, class: `arrow arrow-${kind}`, viewBox: '0 0 10 10', refX: 9, refY: 5,
      markerWidth: 7, markerHeight: 7, orient: 'auto-start-reverse',
    }, svg('path', { d: 'M0,0 L10,5 L0,10 z' })))));

  for (const e of g.edges()) {
    const label = g.edge(e);
    const kind = label.how || 'plain';
    root.append(svg('g', {
      class: `edge edge-${kind}${label.edge.condition ? ' conditional' : ''}`,
      dataset: { from: e.v, to: e.w, decision: label.how || 'none' },
    },
    svg('path', { d: basis(label.points), 'marker-end': `url(#arrow-${kind})` }),
    label.text && svg('g', { class: 'edge-label', transform: `translate(${label.x},${label.y})` },
      svg('rect', { x: -label.width / 2, y: -9, width: label.width, height: 18, rx: 4 }),
      svg('text', { 'text-anchor': 'middle', dy: '0.35em' }, label.text),
      svg('title', {}, label.edge.condition))));
  }

  for (const node of nodes) {
    const box = g.node(node.id);
    const task = tasks.get(node.id);
    const state = preview ? 'preview' : task ? task.state : 'none';
    const stateText = preview ? '' : task ? task.state.toLowerCase() : 'not reached';
    const attempts = task && task.attempt > 0 ? ` · attempt ${attempt(task)}` : '';
    const el = svg('g', {
      class: `node state-${state.toLowerCase()}${node.id === selected ? ' selected' : ''}${onSelect ? ' clickable' : ''}`,
      transform: `translate(${box.x - box.width / 2},${box.y - box.height / 2})`,
      tabindex: onSelect ? 0 : undefined,
      role: onSelect ? 'button' : undefined,
      dataset: { node: node.id, state: preview ? 'preview' : task ? task.state : 'NOT_REACHED' },
    },
    svg('rect', { width: box.width, height: box.height, rx: 8 }),
    svg('text', { class: 'node-id', x: 12, y: 20 }, node.id),
    svg('text', { class: 'node-type', x: 12, y: 37 }, node.type + (stateText ? ` · ${stateText}` : '') + attempts),
    svg('title', {}, `${node.id} (${node.type})${stateText ? `: ${stateText}` : ''}`));
    if (onSelect) {
      el.addEventListener('click', () => onSelect(node.id));
      el.addEventListener('keydown', (ev) => {
        if (ev.key === 'Enter' || ev.key === ' ') { ev.preventDefault(); onSelect(node.id); }
      });
    }
    root.append(el);
  }
  return root;
}

/** The legend: one swatch per state, coloured as the graph colours nodes. */
export function legend() {
  return h('ul', { class: 'legend' }, [...STATES, 'NOT_REACHED'].map((s) => {
    const cls = s === 'NOT_REACHED' ? 'none' : s.toLowerCase();
    return h('li', {}, h('span', { class: `swatch state-${cls}` }), s.replace('_', ' ').toLowerCase());
  }));
}

/** A smooth path through dagre's edge points (a uniform B-spline, like d3's curveBasis). */
function basis(points) {
  const p = points.map((pt) => [pt.x, pt.y]);
  if (p.length < 3) return `M${p[0]}L${p[p.length - 1]}`;
  let d = `M${p[0]}L${(5 * p[0][0] + p[1][0]) / 6},${(5 * p[0][1] + p[1][1]) / 6}`;
  for (let i = 2; i < p.length; i++) {
    const [x0, y0] = p[i - 2];
    const [x1, y1] = p[i - 1];
    const [x, y] = p[i];
    d += `C${(2 * x0 + x1) / 3},${(2 * y0 + y1) / 3} ${(x0 + 2 * x1) / 3},${(y0 + 2 * y1) / 3} ${(x0 + 4 * x1 + x) / 6},${(y0 + 4 * y1 + y) / 6}`;
  }
  const [x0, y0] = p[p.length - 2];
  const [x1, y1] = p[p.length - 1];
  d += `C${(2 * x0 + x1) / 3},${(2 * y0 + y1) / 3} ${(x0 + 2 * x1) / 3},${(y0 + 2 * y1) / 3} ${x1},${y1}`;
  return d;
}
