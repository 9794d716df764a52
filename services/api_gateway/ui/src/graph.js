// The workflow graph: laid out by dagre, drawn as SVG, shown in a viewer that
// fits it to the pane's width, zooms and pans (issue 31: a 9-node graph was
// clipped at 1400 px with 9 px text).
//
// Each node is coloured by its task's state (the CSS classes state-*); its box
// is as wide as its longest line, measured in the font it is drawn in, so
// "attempt 2 of 3" stays inside. An edge with a condition shows it whole,
// wrapped, from its start (the node it reads is never cut off); a long one is
// cut at its end, and its title holds it all. A graph whose left-to-right
// layout would not fit the pane with text of 12 px or more is laid out top to
// bottom instead (a long chain fits the width, the page scrolls); whatever is
// still wider pans, by dragging or the scroll bars.

import { graphlib, layout } from '@dagrejs/dagre';
import { h, mount, svg } from './dom.js';
import { attempt, itemsProgress } from './format.js';

export const STATES = ['PENDING', 'QUEUED', 'RUNNING', 'WAITING', 'COMPLETED', 'FAILED', 'SKIPPED', 'CANCELLED'];
//: the sizes the CSS draws in (style.css, svg.graph): the smallest is the edge label's
const ID_FONT = 14;
const LINE_FONT = 13;
const LABEL_FONT = 12.5;
//: no fit shrinks text below 12 px
export const READABLE_SCALE = 12 / LABEL_FONT;
const MAX_FIT_SCALE = 1.25;
const LINE_HEIGHT = 17;
const PAD_X = 12;
const LABEL_CHARS = 30;
const LABEL_LINES = 3;

/** The latest task of each node (a retried node may have had earlier ones). */
export function tasksByNode(tasks) {
  const out = new Map();
  for (const t of tasks || []) {
    const seen = out.get(t.node_id);
    if (!seen || seen.created_at <= t.created_at) out.set(t.node_id, t);
  }
  return out;
}

/** How a run went along one edge: 'taken', 'not-taken' (a SWITCH chose otherwise), or ''. */
function decision(edge, tasks, nodeTypes) {
  const source = tasks.get(edge.from);
  if (!source || source.state !== 'COMPLETED') return '';
  if (nodeTypes.get(edge.from) === 'SWITCH' && Array.isArray(source.branches)) {
    return source.branches.includes(edge.to) ? 'taken' : 'not-taken';
  }
  const target = tasks.get(edge.to);
  return target && target.state !== 'SKIPPED' ? 'taken' : '';
}

let measurer = null;
/** The width of `text` in px, drawn at `size` px (bold when `bold`) in the page's font. */
function textWidth(text, size, bold = false) {
  if (!measurer) measurer = document.createElement('canvas').getContext('2d');
  const family = getComputedStyle(document.body).fontFamily || 'sans-serif';
  measurer.font = `${bold ? '600 ' : ''}${size}px ${family}`;
  const measured = measurer.measureText(text).width;
  // a little over: the SVG's text may render a hair wider than the canvas measures
  return Math.ceil(measured * 1.04 + 1);
}

/** A condition without its template braces. */
export function bareCondition(text) {
  return String(text).replace(/^\s*\{\{\s*/, '').replace(/\s*\}\}\s*$/, '');
}

/**
 * `text` in lines of at most `max` characters, broken at spaces (a longer word at its
 * dots), at most `lines` of them: the rest is cut at the end with "…", never the start.
 */
export function wrap(text, max = LABEL_CHARS, lines = LABEL_LINES) {
  const words = [];
  for (const word of text.split(/\s+/).filter(Boolean)) {
    if (word.length <= max) { words.push(word); continue; }
    let rest = word;
    while (rest.length > max) {
      const dot = rest.lastIndexOf('.', max - 1);
      const at = dot > 0 ? dot + 1 : max;
      words.push(rest.slice(0, at));
      rest = rest.slice(at);
    }
    if (rest) words.push(rest);
  }
  const out = [];
  let line = '';
  for (const word of words) {
    const joined = line ? (line.endsWith('.') && !word.match(/^[=!<>&|]/) ? line + word : `${line} ${word}`) : word;
    if (joined.length <= max) { line = joined; continue; }
    out.push(line);
    line = word;
  }
  if (line) out.push(line);
  if (out.length <= lines) return out;
  const kept = out.slice(0, lines);
  kept[lines - 1] = `${kept[lines - 1].slice(0, max - 1)}…`;
  return kept;
}

function nodeLines(node, task, preview) {
  const stateText = preview ? '' : task ? task.state.toLowerCase() : 'not reached';
  const lines = [node.type + (stateText ? ` · ${stateText}` : '')];
  if (task && task.items) lines.push(`${itemsProgress(task)} items`);
  else if (task && task.attempt > 0) lines.push(`attempt ${attempt(task)}`);
  return { stateText, lines };
}

function laidOut(spec, direction, boxes, labels) {
  const g = new graphlib.Graph({ multigraph: true });
  g.setGraph({ rankdir: direction, nodesep: 24, ranksep: direction === 'LR' ? 56 : 44, edgesep: 14, marginx: 12, marginy: 12 });
  g.setDefaultEdgeLabel(() => ({}));
  for (const node of spec.nodes || []) g.setNode(node.id, { ...boxes.get(node.id) });
  (spec.edges || []).forEach((edge, i) => g.setEdge(edge.from, edge.to, { ...labels[i] }, String(i)));
  layout(g);
  return g;
}

/**
 * Draw `spec` (a stored definition: nodes and edges) as an <svg> at its natural size.
 * `tasks`: Map node_id → task (empty for a preview); `selected`: a node id;
 * `onSelect(nodeId)`: called when a node is clicked; `available`: the pane's width in
 * px, which picks the layout's direction.
 */
export function drawGraph(spec, { tasks = new Map(), selected = null, onSelect = null, preview = false, available = 0 } = {}) {
  const nodes = spec.nodes || [];
  const edges = spec.edges || [];
  const nodeTypes = new Map(nodes.map((n) => [n.id, n.type]));
  const boxes = new Map();
  const texts = new Map();
  for (const node of nodes) {
    const task = tasks.get(node.id);
    const shown = nodeLines(node, task, preview);
    texts.set(node.id, shown);
    const width = Math.max(
      100,
      textWidth(node.id, ID_FONT, true),
      ...shown.lines.map((line) => textWidth(line, LINE_FONT)),
    ) + 2 * PAD_X;
    boxes.set(node.id, { width, height: 14 + LINE_HEIGHT * (1 + shown.lines.length) });
  }
  const labels = edges.map((edge) => {
    const how = preview ? '' : decision(edge, tasks, nodeTypes);
    if (!edge.condition) return { how, edge, lines: [] };
    const mark = how === 'taken' ? '✓ ' : how === 'not-taken' ? '✗ ' : '';
    const lines = wrap(bareCondition(edge.condition));
    lines[0] = mark + lines[0];
    const width = Math.max(...lines.map((line) => textWidth(line, LABEL_FONT))) + 12;
    return { how, edge, lines, width, height: lines.length * 16 + 6, labelpos: 'c' };
  });
  let g = laidOut(spec, 'LR', boxes, labels);
  let direction = 'LR';
  if (available > 0 && g.graph().width * READABLE_SCALE > available) {
    const tb = laidOut(spec, 'TB', boxes, labels);
    if (tb.graph().width < g.graph().width) { g = tb; direction = 'TB'; }
  }
  const width = Math.ceil(g.graph().width);
  const height = Math.ceil(g.graph().height);

  const root = svg('svg', {
    class: 'graph',
    viewBox: `0 0 ${width} ${height}`,
    width,
    height,
    role: 'img',
    'aria-label': `graph of ${spec.id || 'the workflow'}`,
    dataset: { width, height, direction },
  });
  root.append(svg('defs', {}, ['plain', 'taken', 'not-taken'].map((kind) =>
    svg('marker', {
      id: `arrow-${kind}`, class: `arrow arrow-${kind}`, viewBox: '0 0 10 10', refX: 9, refY: 5,
      markerWidth: 7, markerHeight: 7, orient: 'auto-start-reverse',
    }, svg('path', { d: 'M0,0 L10,5 L0,10 z' })))));

  for (const e of g.edges()) {
    const label = g.edge(e);
    const kind = label.how || 'plain';
    const top = -label.height / 2;
    root.append(svg('g', {
      class: `edge edge-${kind}${label.edge.condition ? ' conditional' : ''}`,
      dataset: { from: e.v, to: e.w, decision: label.how || 'none' },
    },
    svg('path', { d: basis(label.points), 'marker-end': `url(#arrow-${kind})` }),
    label.lines.length > 0 && svg('g', { class: 'edge-label', transform: `translate(${label.x},${label.y})` },
      svg('rect', { x: -label.width / 2, y: top, width: label.width, height: label.height, rx: 4 }),
      svg('text', { 'text-anchor': 'middle' }, label.lines.map((line, i) =>
        svg('tspan', { x: 0, y: top + 3 + 16 * i + 12 }, line))),
      svg('title', {}, label.edge.condition))));
  }

  for (const node of nodes) {
    const box = g.node(node.id);
    const task = tasks.get(node.id);
    const { stateText, lines } = texts.get(node.id);
    const state = preview ? 'preview' : task ? task.state : 'none';
    const el = svg('g', {
      class: `node state-${state.toLowerCase()}${node.id === selected ? ' selected' : ''}${onSelect ? ' clickable' : ''}`,
      transform: `translate(${box.x - box.width / 2},${box.y - box.height / 2})`,
      tabindex: onSelect ? 0 : undefined,
      role: onSelect ? 'button' : undefined,
      dataset: { node: node.id, state: preview ? 'preview' : task ? task.state : 'NOT_REACHED' },
    },
    svg('rect', { width: box.width, height: box.height, rx: 8 }),
    svg('text', { class: 'node-id', x: PAD_X, y: 8 + 14 }, node.id),
    lines.map((line, i) => svg('text', {
      class: i === 0 ? 'node-type' : 'node-attempt', x: PAD_X, y: 8 + 14 + LINE_HEIGHT * (i + 1),
    }, line)),
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

/**
 * A viewer for drawn graphs: `element` holds its zoom controls and the pane (id
 * `paneId`); `show(svg)` puts a new drawing in, keeping the reader's zoom and scroll
 * (the run page redraws every second). Until the reader zooms, the graph fits the
 * pane's width, between 12 px text and 125 %; "Fit" goes back to that. Ctrl + wheel
 * zooms at the pointer; dragging the background pans.
 */
export function graphViewer(paneId = 'graph') {
  const pane = h('div', { class: 'graph-pane', id: paneId });
  const level = h('span', { class: 'zoom-level', id: `${paneId}-zoom`, 'aria-live': 'polite' });
  let zoom = null; // null: fit to width
  let drawing = null;

  const natural = () => ({ width: Number(drawing.dataset.width), height: Number(drawing.dataset.height) });
  const fitScale = () => {
    const room = Math.max(pane.clientWidth - 2, 200);
    return Math.min(MAX_FIT_SCALE, Math.max(READABLE_SCALE, room / natural().width));
  };
  const scale = () => (zoom === null ? fitScale() : zoom);

  function apply() {
    if (!drawing) return;
    const s = scale();
    const { width, height } = natural();
    drawing.setAttribute('width', String(Math.round(width * s)));
    drawing.setAttribute('height', String(Math.round(height * s)));
    level.textContent = `${Math.round(s * 100)} %${zoom === null ? ' (fit)' : ''}`;
    pane.dataset.scale = s.toFixed(3);
  }

  function zoomTo(next, at = null) {
    const before = scale();
    const s = Math.min(3, Math.max(0.25, next));
    const focus = at || { x: pane.clientWidth / 2, y: pane.clientHeight / 2 };
    const gx = (pane.scrollLeft + focus.x) / before;
    const gy = (pane.scrollTop + focus.y) / before;
    zoom = s;
    apply();
    pane.scrollLeft = gx * s - focus.x;
    pane.scrollTop = gy * s - focus.y;
  }

  const button = (text, title, onclick, id) => h('button', { type: 'button', class: 'zoom', title, 'aria-label': title, onclick, id }, text);
  const controls = h('div', { class: 'graph-controls' },
    button('−', 'zoom out', () => zoomTo(scale() / 1.25), `${paneId}-zoom-out`),
    button('+', 'zoom in', () => zoomTo(scale() * 1.25), `${paneId}-zoom-in`),
    button('Fit', 'fit to the width', () => { zoom = null; apply(); pane.scrollLeft = 0; }, `${paneId}-fit`),
    button('1:1', 'natural size', () => zoomTo(1), `${paneId}-actual`),
    level);

  pane.addEventListener('wheel', (ev) => {
    if (!ev.ctrlKey || !drawing) return;
    ev.preventDefault();
    const rect = pane.getBoundingClientRect();
    zoomTo(scale() * (ev.deltaY < 0 ? 1.1 : 1 / 1.1), { x: ev.clientX - rect.left, y: ev.clientY - rect.top });
  }, { passive: false });
  let drag = null;
  pane.addEventListener('pointerdown', (ev) => {
    if (ev.button !== 0 || ev.target.closest('g.node')) return;
    drag = { x: ev.clientX, y: ev.clientY, left: pane.scrollLeft, top: pane.scrollTop };
    pane.classList.add('panning');
  });
  pane.addEventListener('pointermove', (ev) => {
    if (!drag) return;
    pane.scrollLeft = drag.left - (ev.clientX - drag.x);
    pane.scrollTop = drag.top - (ev.clientY - drag.y);
  });
  const stop = () => { drag = null; pane.classList.remove('panning'); };
  pane.addEventListener('pointerup', stop);
  pane.addEventListener('pointerleave', stop);
  if (typeof ResizeObserver !== 'undefined') new ResizeObserver(() => { if (zoom === null) apply(); }).observe(pane);

  return {
    element: h('div', { class: 'graph-viewer' }, controls, pane),
    pane,
    /** The width the drawing may take: for drawGraph's `available`. */
    available: () => pane.clientWidth || 0,
    show(next) {
      const { scrollLeft, scrollTop } = pane;
      drawing = next;
      mount(pane, next);
      apply();
      pane.scrollLeft = scrollLeft;
      pane.scrollTop = scrollTop;
    },
  };
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
