"""WorkflowDAG: one definition version, validated, compiled and indexed.

Built once per (workflow, version) and read-only after, so the engine can
cache it and share it between events and runs.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, replace
from types import MappingProxyType

from composer_core.errors import InvalidRequest, TemplateError
from composer_core.kinds import Category, NodeType, kind_of
from composer_core.kinds.map import inner_node_fields
from composer_core.model._flow import CompiledFlow
from composer_core.model._input_schema import InputSchema
from composer_core.model._spec import Edge, Node, RetryPolicy, WorkflowSpec
from composer_core.templates import (
    CompiledValue,
    Expression,
    ExpressionEngine,
    Json,
)

#: A template inside a string: what a templated signal name may render to anything in.
_TEMPLATE = re.compile(r"\{\{.*?\}\}", re.DOTALL)


@dataclass(frozen=True, slots=True)
class NodeRate:
    """A node's rate limit as the admission step keys it: ``key`` names its bucket in
    storage (``rate:<key>``)."""

    key: str
    limit: int
    per_seconds: float
    units: int


#: The longest a rendered key may be (as a run's concurrency key).
MAX_RENDERED_KEY = 128


@dataclass(frozen=True, slots=True)
class RenderedKeys:
    """A task's limit keys rendered from its node's templates when the task is created,
    as stored on its row (``global:…``/``workflow:…:…`` and ``rate:…``); None: that key
    is a plain name (or absent), the node's own applies."""

    concurrency: str | None = None
    rate: str | None = None


@dataclass(frozen=True, slots=True)
class NodeLine:
    """The limits a worker node's attempts go through on the admission step
    (docs/architecture.md §4.12): its concurrency key (``key``, ``global:<key>`` or
    ``workflow:<id>:<key>``, with ``max``; None: none) and its rate limit (None: none).
    ``templated``: a key is a template, rendered per task (``with_keys``); such a line's
    keys are the templates' text until then, and name no stored key."""

    key: str | None
    max: int
    rate: NodeRate | None = None
    templated: bool = False

    @classmethod
    def of(cls, workflow_id: str, node: Node) -> NodeLine:
        rate = None
        templated = False
        if node.rate_limit is not None:
            r = node.rate_limit
            rate = NodeRate(f"rate:{r.key}", r.limit, r.per_seconds, r.units)
            templated = _is_template(r.key)
        concurrency = node.concurrency
        if concurrency is None:
            return cls(None, 0, rate, templated)
        templated = templated or _is_template(concurrency.key)
        return cls(
            concurrency_prefix(workflow_id, node) + concurrency.key,
            concurrency.max,
            rate,
            templated,
        )

    def with_keys(self, keys: RenderedKeys | None) -> NodeLine:
        """This line with one task's rendered keys in place of its templates."""
        if keys is None or not self.templated:
            return self
        rate = self.rate
        if rate is not None and keys.rate is not None:
            rate = replace(rate, key=keys.rate)
        key = keys.concurrency if keys.concurrency is not None else self.key
        return NodeLine(key, self.max, rate, False)


def _is_template(key: str) -> bool:
    return "{{" in key


def concurrency_prefix(workflow_id: str, node: Node) -> str:
    """What a node's concurrency key is stored under: ``global:`` or ``workflow:<id>:``."""
    assert node.concurrency is not None
    return "global:" if node.concurrency.scope == "global" else f"workflow:{workflow_id}:"


def render_key(value: CompiledValue, activation: Mapping[str, object], what: str) -> str:
    """A limit key's template rendered: a non-empty string or number of at most
    ``MAX_RENDERED_KEY`` characters; TemplateError naming ``what`` otherwise."""
    try:
        rendered = value.evaluate(activation)
    except TemplateError as exc:
        if type(exc) is not TemplateError:  # a budget spent: as any template's
            raise
        raise TemplateError(f"{what}: {exc}") from exc
    if isinstance(rendered, bool) or not isinstance(rendered, (str, int, float)):
        raise TemplateError(f"{what} must render to a string or a number, not {rendered!r}")
    key = str(rendered)
    if not key:
        raise TemplateError(f"{what} rendered empty")
    if len(key) > MAX_RENDERED_KEY:
        raise TemplateError(
            f"{what} rendered {len(key)} characters; the limit is {MAX_RENDERED_KEY}"
        )
    return key


@dataclass(frozen=True, slots=True)
class CompiledNode:
    """What a node's templates compile to, and which task outputs they read."""

    spec: CompiledValue
    #: Node ids whose outputs evaluating this node may need; None: unknown, load all reached.
    task_refs: frozenset[str] | None
    #: A MAP: its inner node's spec, rendered per item (with ``item`` and ``index``).
    item: CompiledValue | None = None
    #: Its worker node's (a MAP's: its inner node's) templated ``concurrency.key`` and
    #: ``rate_limit.key`` (None: a plain name, or no such limit).
    concurrency_key: CompiledValue | None = None
    rate_key: CompiledValue | None = None


class WorkflowDAG:
    """A validated definition version. Build it with ``build_dag``."""

    def __init__(
        self,
        spec: WorkflowSpec,
        version: int,
        start: Node,
        compiled: Mapping[str, CompiledNode],
        conditions: Mapping[tuple[str, str], Expression],
        output: CompiledValue | None,
        output_refs: frozenset[str] | None,
        topo_order: tuple[str, ...],
        engine: ExpressionEngine,
        input_schema: InputSchema | None = None,
        flow: CompiledFlow | None = None,
    ) -> None:
        self.spec = spec
        #: The version's run-level ``concurrency`` and ``priority``; None: neither.
        self.flow = flow
        #: The definition's ``input_schema``, compiled; None: it takes any input.
        self.input_schema = input_schema
        #: The engine that compiled this version's expressions; evaluation binds through it.
        self.engine = engine
        self.version = version
        self._start = start
        self._nodes: Mapping[str, Node] = MappingProxyType({n.id: n for n in spec.nodes})
        #: Each MAP node's inner node (its id: the MAP's), which its item tasks run as.
        self._inner: Mapping[str, Node] = MappingProxyType(
            {
                n.id: Node.model_validate(fields)
                for n in spec.nodes
                if kind_of(n.type).category is Category.MAP
                and (fields := inner_node_fields(n)) is not None
            }
        )
        outgoing: dict[str, list[Edge]] = {n.id: [] for n in spec.nodes}
        incoming: dict[str, list[Edge]] = {n.id: [] for n in spec.nodes}
        for edge in spec.edges:
            outgoing[edge.source].append(edge)
            incoming[edge.target].append(edge)
        self._outgoing = {k: tuple(v) for k, v in outgoing.items()}
        self._incoming = {k: tuple(v) for k, v in incoming.items()}
        self._successors = {
            k: tuple(self._nodes[e.target] for e in v) for k, v in self._outgoing.items()
        }
        self._compiled = compiled
        #: Nodes whose spec holds no expression: their input needs no activation.
        self._constant_inputs = frozenset(
            node_id for node_id, c in compiled.items() if not c.spec.expressions
        )
        #: A MAP's line is its inner node's, which its items go through.
        self._lines = {
            n.id: NodeLine.of(spec.id, self._inner.get(n.id, n))
            for n in spec.nodes
            if (w := self._inner.get(n.id, n)).concurrency is not None or w.rate_limit is not None
        }
        self._conditions = conditions
        self._output = output
        self._output_refs = output_refs
        self._topo_index = {node_id: i for i, node_id in enumerate(topo_order)}
        self._descendants: dict[str, tuple[str, ...]] = {}
        events = sorted(
            {
                event
                for n in spec.nodes
                if (event := kind_of(n.type).awaited_signal(n.spec)) is not None
            }
        )
        self._signal_names = tuple(events)
        self._signal_patterns = tuple(
            re.compile(".*".join(re.escape(part) for part in _TEMPLATE.split(event)), re.DOTALL)
            for event in events
        )

    @property
    def workflow_id(self) -> str:
        return self.spec.id

    @property
    def nodes(self) -> tuple[Node, ...]:
        return tuple(self._nodes.values())

    def node(self, node_id: str) -> Node | None:
        return self._nodes.get(node_id)

    def __contains__(self, node_id: object) -> bool:
        return node_id in self._nodes

    def successors(self, node_id: str) -> tuple[Node, ...]:
        return self._successors.get(node_id, ())

    def predecessors(self, node_id: str) -> tuple[Node, ...]:
        return tuple(self._nodes[e.source] for e in self._incoming.get(node_id, ()))

    def incoming(self, node_id: str) -> tuple[Edge, ...]:
        return self._incoming.get(node_id, ())

    def outgoing(self, node_id: str) -> tuple[Edge, ...]:
        return self._outgoing.get(node_id, ())

    def descendants(self, node_id: str) -> tuple[str, ...]:
        """Every node reachable from ``node_id`` (not itself), in topological order."""
        cached = self._descendants.get(node_id)
        if cached is None:
            seen: set[str] = set()
            stack = [e.target for e in self.outgoing(node_id)]
            while stack:
                current = stack.pop()
                if current not in seen:
                    seen.add(current)
                    stack.extend(e.target for e in self.outgoing(current))
            cached = tuple(sorted(seen, key=self._topo_index.__getitem__))
            self._descendants[node_id] = cached
        return cached

    def start_node(self, override: str | None = None) -> Node:
        """The node a run starts at: ``override`` if given, else the definition's start."""
        if override is None:
            return self._start
        node = self._nodes.get(override)
        if node is None:
            raise InvalidRequest(
                f"start node {override!r} is not in workflow {self.workflow_id!r} "
                f"version {self.version}"
            )
        return node

    def task_refs(self, node_id: str) -> frozenset[str] | None:
        """Outputs the node's templates (or a SWITCH's conditions) may read; None: any."""
        compiled = self._compiled.get(node_id)
        return compiled.task_refs if compiled else frozenset()

    def compiled_spec(self, node_id: str) -> CompiledValue:
        return self._compiled[node_id].spec

    def render_input(
        self, node_id: str, activation: Mapping[str, object], *, max_bytes: int | None = None
    ) -> Json:
        """The node's input as it is stored and handed to its worker: its spec evaluated
        (secret references listed under ``$secrets``) and, for an HTTP node that carries
        any, the only origin they may be sent to under ``$origin``. That origin is read
        from the definition's text, so nothing a run renders into the url can move it.
        Raises TemplateError as ``CompiledValue.evaluate`` does (with ``max_bytes``, the
        node input's limit, as it does)."""
        value = self._compiled[node_id].spec.evaluate(activation, max_bytes=max_bytes)
        node = self._nodes[node_id]
        kind_of(node.type).finish_input(node, value)
        return value

    def constant_input(self, node_id: str) -> bool:
        """Whether the node's spec holds no expression (``render_input`` reads nothing
        of the activation it is given: the caller need not build one)."""
        return node_id in self._constant_inputs

    def render_item(
        self,
        node_id: str,
        activation: Mapping[str, object],
        item: Json,
        index: int,
        *,
        max_bytes: int | None = None,
    ) -> Json:
        """The input of item ``index`` of MAP ``node_id``: its inner node's spec rendered
        with ``item`` and ``index`` (as ``render_input`` renders a node's)."""
        compiled = self._compiled[node_id].item
        assert compiled is not None  # only a MAP's items are rendered
        seen = {**activation, "item": self.engine.to_native(item), "index": index}
        value = compiled.evaluate(seen, max_bytes=max_bytes)
        inner = self._inner[node_id]
        kind_of(inner.type).finish_input(inner, value)
        return value

    def render_keys(
        self,
        node_id: str,
        activation: Mapping[str, object],
        item: Json = None,
        index: int | None = None,
    ) -> RenderedKeys | None:
        """A new task's limit keys rendered from its node's templates (a MAP item's, with
        ``item`` and ``index``); None when its keys are plain names. Raises TemplateError
        naming the field."""
        line = self._lines.get(node_id)
        if line is None or not line.templated:
            return None
        compiled = self._compiled[node_id]
        worker = self._inner.get(node_id) or self._nodes[node_id]
        seen = activation
        if index is not None:
            seen = {**activation, "item": self.engine.to_native(item), "index": index}
        concurrency = rate = None
        if compiled.concurrency_key is not None:
            rendered = render_key(compiled.concurrency_key, seen, "concurrency.key")
            concurrency = concurrency_prefix(self.workflow_id, worker) + rendered
        if compiled.rate_key is not None:
            rate = "rate:" + render_key(compiled.rate_key, seen, "rate_limit.key")
        return RenderedKeys(concurrency, rate)

    def worker_node(self, node_id: str) -> Node | None:
        """The node a task of ``node_id`` runs as: a MAP's item tasks run as its inner node."""
        return self._inner.get(node_id) or self._nodes.get(node_id)

    def condition(self, edge: Edge) -> Expression | None:
        return self._conditions.get((edge.source, edge.target))

    @property
    def output_template(self) -> CompiledValue | None:
        return self._output

    @property
    def output_refs(self) -> frozenset[str] | None:
        return self._output_refs

    def node_line(self, node_id: str) -> NodeLine | None:
        """The limits a worker node's attempts go through (None: none); a MAP's: its
        items'. A templated line names its keys once rendered per task (``with_keys``)."""
        return self._lines.get(node_id)

    @property
    def node_lines(self) -> tuple[NodeLine, ...]:
        """Every node limit of this version with plain names, once each (a templated one
        names its keys only on its tasks' rows)."""
        return tuple(dict.fromkeys(v for v in self._lines.values() if not v.templated))

    @property
    def plain_limit_keys(self) -> frozenset[str]:
        """The stored names (``global:<key>``, ``workflow:<id>:<key>``, ``rate:<key>``) of
        the limit keys this version writes as plain text: what anyone reading the
        definition sees. A key a template renders is made of a run's data instead."""
        keys: set[str] = set()
        for node in self._nodes.values():
            worker = self._inner.get(node.id, node)
            if worker.concurrency is not None and not _is_template(worker.concurrency.key):
                keys.add(concurrency_prefix(self.workflow_id, worker) + worker.concurrency.key)
            if worker.rate_limit is not None and not _is_template(worker.rate_limit.key):
                keys.add(f"rate:{worker.rate_limit.key}")
        return frozenset(keys)

    @property
    def templated_keys(self) -> bool:
        """Some node's limit key is a template: its tasks' keys are on their rows only."""
        return any(line.templated for line in self._lines.values())

    def retry_policy(self, node_id: str) -> RetryPolicy:
        """The node's retry policy (a MAP's: its inner node's, which its items follow)."""
        node = self._inner.get(node_id) or self._nodes[node_id]
        return node.retry_policy

    def max_attempts(self, node_id: str) -> int | None:
        """Attempts in all a node's task may make (None: a node that is never retried)."""
        node = self._nodes[node_id]
        kind = kind_of(node.type)
        if not kind.takes_retry:
            return None
        return node.retry.max_attempts if node.retry is not None else kind.default_attempts

    def queue(self, node_id: str) -> str | None:
        """The queue a worker node is dispatched to (a MAP's: its items'); None for nodes
        no worker runs."""
        node = self._inner.get(node_id) or self._nodes[node_id]
        kind = kind_of(node.type)
        if kind.category is not Category.WORKER:
            return None
        return node.queue or kind.builtin_queue

    @property
    def signal_names(self) -> tuple[str, ...]:
        """The signal every waiting node waits for (a WAIT_FOR_EVENT's ``event``), sorted, once each, as written (a
        templated one, ``approval-{{input.id}}``, stays a template)."""
        return self._signal_names

    def waits_for_signal(self, name: str) -> bool:
        """Whether some WAIT_FOR_EVENT node of this version may wait for ``name``: one
        whose event is ``name``, or a templated one whose text around its templates
        matches it (a template may render to anything). A signal no node can take
        would sit buffered for ever, which is why the engine refuses it."""
        return any(p.fullmatch(name) for p in self._signal_patterns)

    def is_type(self, node_id: str, node_type: NodeType) -> bool:
        node = self._nodes.get(node_id)
        return node is not None and node.type is node_type

    def __repr__(self) -> str:
        return (
            f"WorkflowDAG({self.workflow_id!r}, version={self.version}, nodes={len(self._nodes)})"
        )
