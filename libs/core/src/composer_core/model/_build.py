"""Validating a WorkflowSpec and building its WorkflowDAG.

Every check appends a Problem and goes on, so a user sees every problem of a
definition in one answer. The DAG is built only when there is none.
"""

from __future__ import annotations

import contextlib
import json
import re
from collections.abc import Iterable, Mapping
from typing import Any

from pydantic import ValidationError

from composer_core.errors import DefinitionInvalid, Problem, TemplateError
from composer_core.kinds import KINDS, RESERVED_QUEUES, Category, NodeType, kind_of
from composer_core.kinds._values import parse_seconds, templated
from composer_core.kinds.map import INNER_TYPES, ITEM_ROOTS, inner_node_fields
from composer_core.model._dag import CompiledNode, WorkflowDAG
from composer_core.model._flow import (
    FLOW_ROOTS,
    HIGHEST_PRIORITY,
    LOWEST_PRIORITY,
    CompiledFlow,
    Strategy,
)
from composer_core.model._input_schema import InputSchema, schema_problems
from composer_core.model._limits import DEFAULT_LIMITS, MAX_SECONDS, Limits, nesting_depth
from composer_core.model._spec import HIDDEN_CREDENTIALS, Node, WorkflowSpec, credentials_of
from composer_core.templates import (
    ROOTS,
    SECRET_ROOT,
    SECRETS_KEY,
    CelEngine,
    CompiledValue,
    Expression,
    ExpressionEngine,
    References,
    compile_condition,
    compile_value,
)

_NODE_ID = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_WORKFLOW_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*")
_QUEUE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*")
#: The keys each type's spec takes, from its kind's model (a free-form one: absent here).
_SPEC_KEYS: dict[NodeType, frozenset[str]] = {
    node_type: frozenset(kind.spec_model.model_fields)
    for node_type, kind in KINDS.items()
    if kind.spec_model.model_config.get("extra") == "forbid"
}
_SECRET_IN_CONDITION = (
    "a condition cannot read a secret: the branch it selects is stored with the run, "
    "and would tell the secret's value"
)
_SECRET_IN_OUTPUT = "the run's output is stored with the run: it cannot hold a secret"
_SECRET_COMPUTED = (
    "a secret cannot be computed with: write {{ secret.NAME }} alone in its template "
    '(text around it is fine, as in "Bearer {{ secret.NAME }}"), NAME made of letters, '
    "digits and '_', not starting with a digit"
)


def _listed(names: list[str], last: str) -> str:
    return f" {last} ".join(filter(None, (", ".join(names[:-1]), names[-1])))


#: The types whose nodes take queue, timeout_seconds and retry ("HTTP, PYTHON and TASK").
_WORKER_TYPES = _listed([t for t, k in KINDS.items() if k.category is Category.WORKER], "and")
_RETRY_TYPES = _listed([t for t, k in KINDS.items() if k.takes_retry], "and")
#: The types whose outgoing edges may carry a condition ("SWITCH").
_CONDITION_TYPES = _listed([t for t, k in KINDS.items() if k.takes_conditions], "or")
#: A node concurrency key: a name (no ':', which joins it to its scope in storage).
_LIMIT_KEY = re.compile(r"[A-Za-z0-9_.-]{1,128}")
_default_engine: ExpressionEngine | None = None


def default_engine() -> ExpressionEngine:
    """The process-wide CEL engine (its grammar is built once)."""
    global _default_engine
    if _default_engine is None:
        _default_engine = CelEngine()
    return _default_engine


def build_dag(
    spec: WorkflowSpec,
    *,
    version: int = 1,
    engine: ExpressionEngine | None = None,
    limits: Limits = DEFAULT_LIMITS,
    stored: bool = False,
) -> WorkflowDAG:
    """Validate ``spec`` and build its DAG; raise DefinitionInvalid listing every problem.

    ``stored``: the version is already stored, so it passed the rules of its day. Rules
    that only keep new definitions out of harm (an HTTP node carrying a secret must fix
    its url's origin) are not applied to it: a rule added later must not strand its
    runs, and a check at run time stands in for each of them (docs/secrets.md).
    The reserved queue names are not applied either: the workers refuse what they must not
    run, and the version's runs still load.
    """
    return _Builder(spec, version, engine or default_engine(), limits, stored=stored).build()


def graph_problems(
    spec: WorkflowSpec,
    *,
    untyped: frozenset[int] = frozenset(),
    engine: ExpressionEngine | None = None,
    limits: Limits = DEFAULT_LIMITS,
) -> list[Problem]:
    """Every problem of ``spec`` beyond its shape, for a definition whose shape failed.

    ``untyped`` holds the positions of nodes whose type was not one Composer knows
    (they stand in as TASK nodes): the checks that depend on a node's type skip them,
    so they add nothing their unknown type did not already say.
    """
    builder = _Builder(spec, 1, engine or default_engine(), limits, untyped)
    builder.collect()
    return builder.problems


def validate(
    spec: WorkflowSpec, *, engine: ExpressionEngine | None = None, limits: Limits = DEFAULT_LIMITS
) -> list[Problem]:
    """Every problem of ``spec``; empty when it is valid."""
    try:
        build_dag(spec, engine=engine, limits=limits)
    except DefinitionInvalid as exc:
        return exc.problems
    return []


class _Builder:
    def __init__(
        self,
        spec: WorkflowSpec,
        version: int,
        engine: ExpressionEngine,
        limits: Limits,
        untyped: frozenset[int] = frozenset(),
        *,
        stored: bool = False,
    ) -> None:
        self.spec = spec
        self.untyped = untyped
        self.stored = stored
        self.version = version
        self.engine = engine
        self.limits = limits
        self.problems: list[Problem] = []
        self.index: dict[str, int] = {}  # node id → its first position
        self.ancestors: dict[str, frozenset[str]] = {}
        self.too_deep: set[int] = set()  # node positions (-1: the output) not to compile
        self.flow: CompiledFlow | None = None

    def add(self, path: str, message: str) -> None:
        self.problems.append(Problem(path, message))

    def build(self) -> WorkflowDAG:
        order, start, compiled, conditions, (output, output_refs) = self.collect()
        if self.problems or order is None or start is None:
            raise DefinitionInvalid(self.problems)
        return WorkflowDAG(
            self.spec,
            self.version,
            start,
            compiled,
            conditions,
            output,
            output_refs,
            tuple(order),
            self.engine,
            None if self.spec.input_schema is None else InputSchema(self.spec.input_schema),
            self.flow,
        )

    def collect(
        self,
    ) -> tuple[
        list[str] | None,
        Node | None,
        dict[str, CompiledNode],
        dict[tuple[str, str], Expression],
        tuple[CompiledValue | None, frozenset[str] | None],
    ]:
        """Run every check, adding to ``problems``; return what the DAG is built of."""
        self.check_header()
        self.flow = self.compile_flow()
        self.check_nodes()
        self.check_schedules()
        self.check_edges()
        order = self.topological_order()
        start = self.check_start(order)
        for i, node in enumerate(self.spec.nodes):
            self.check_node_spec(i, node)
        compiled = self.compile_nodes()
        conditions = self.compile_conditions()
        return order, start, compiled, conditions, self.compile_output()

    def typed(self, node_id: str) -> Node | None:
        """The node named ``node_id`` when its type is known (not a stand-in)."""
        i = self.index.get(node_id)
        return None if i is None or i in self.untyped else self.spec.nodes[i]

    # -- shape -------------------------------------------------------------

    def check_header(self) -> None:
        spec, limits = self.spec, self.limits
        if not _WORKFLOW_ID.fullmatch(spec.id) or len(spec.id) > limits.max_id_length:
            self.add(
                "id",
                f"{spec.id!r} is not a workflow id: use letters, digits, '_', '-' or '.', "
                f"starting with a letter or digit, at most {limits.max_id_length} characters",
            )
        if spec.webhook_url is not None and not spec.webhook_url.startswith(
            ("http://", "https://")
        ):
            self.add("webhook_url", "must be an http:// or https:// URL")
        elif (
            not self.stored
            and spec.webhook_url is not None
            and credentials_of(spec.webhook_url) == HIDDEN_CREDENTIALS
        ):
            self.add(
                "webhook_url",
                f"its user:password is {HIDDEN_CREDENTIALS!r}, which is how Composer shows "
                "hidden credentials (a definition read back from the API): write the real "
                "ones, or leave user:password@ out",
            )
        if spec.input_schema is not None:
            if nesting_depth(spec.input_schema) > limits.max_depth:
                self.add("input_schema", f"nested deeper than {limits.max_depth} levels")
            else:
                self.problems.extend(schema_problems(spec.input_schema))
        if nesting_depth(spec.output) > limits.max_depth:
            self.add("output", f"nested deeper than {limits.max_depth} levels")
            self.too_deep.add(-1)
        if not spec.nodes:
            self.add("nodes", "a workflow needs at least one node")
        if len(spec.nodes) > limits.max_nodes:
            self.add("nodes", f"{len(spec.nodes)} nodes; the limit is {limits.max_nodes}")
        if len(spec.edges) > limits.max_edges:
            self.add("edges", f"{len(spec.edges)} edges; the limit is {limits.max_edges}")

    def check_schedules(self) -> None:
        """Each schedule's id is unique, and its input passes the version's
        ``input_schema`` when the schema itself is sound: a schedule whose every fire
        would be refused is refused at publish, not found out at its first fire."""
        seen: dict[str, int] = {}
        schema = self.spec.input_schema
        checked = (
            None
            if self.stored
            or schema is None
            or any(p.path.startswith("input_schema") for p in self.problems)
            else InputSchema(schema)
        )
        for i, schedule in enumerate(self.spec.schedules):
            if schedule.id in seen:
                self.add(
                    f"schedules[{i}].id",
                    f"duplicate schedule id {schedule.id!r} (first at schedules[{seen[schedule.id]}])",
                )
            seen.setdefault(schedule.id, i)
            for problem in [] if checked is None else checked.problems(schedule.input):
                self.add(
                    f"schedules[{i}].input" + problem.path.removeprefix("$"),
                    f"does not match the input_schema: {problem.message}",
                )

    def check_nodes(self) -> None:
        for i, node in enumerate(self.spec.nodes):
            path = f"nodes[{i}]"
            if not _NODE_ID.fullmatch(node.id) or len(node.id) > self.limits.max_id_length:
                self.add(
                    f"{path}.id",
                    f"{node.id!r} is not a node id: use letters, digits and '_', not starting "
                    f"with a digit, at most {self.limits.max_id_length} characters "
                    "(so that tasks.<id> reads in an expression)",
                )
            if node.id in self.index:
                self.add(
                    f"{path}.id",
                    f"duplicate node id {node.id!r} (first at nodes[{self.index[node.id]}])",
                )
            else:
                self.index[node.id] = i
            kind = kind_of(node.type)
            if i in self.untyped:
                pass  # which fields apply depends on the type, which is unknown
            elif kind.category is Category.WORKER:
                self.check_worker_fields(path, node)
            else:
                for field in ("queue", "timeout_seconds", "retry", "concurrency", "rate_limit"):
                    if field == "retry" and kind.takes_retry:
                        continue
                    if getattr(node, field) is not None:
                        self.add(
                            f"{path}.{field}",
                            f"applies only to {_WORKER_TYPES if field != 'retry' else _RETRY_TYPES}"
                            f" nodes, not {node.type}",
                        )
            if nesting_depth(node.spec) > self.limits.max_depth:
                # Measuring or compiling it would recurse that deep: leave it alone.
                self.add(f"{path}.spec", f"nested deeper than {self.limits.max_depth} levels")
                self.too_deep.add(i)
            else:
                size = len(json.dumps(node.spec, default=str).encode())
                if size > self.limits.max_spec_bytes:
                    self.add(
                        f"{path}.spec", f"{size} bytes; the limit is {self.limits.max_spec_bytes}"
                    )
            retry = node.retry
            if retry is not None and retry.max_seconds < retry.initial_seconds:
                self.add(f"{path}.retry.max_seconds", "must be at least initial_seconds")

    def check_worker_fields(self, path: str, node: Node) -> None:
        """The queue a worker node names (or must name)."""
        kind = kind_of(node.type)
        if kind.own_queue and not node.queue:
            self.add(f"{path}.queue", f"required for {node.type}: the queue your workers read")
        if node.queue is not None and not _QUEUE.fullmatch(node.queue):
            self.add(
                f"{path}.queue",
                f"{node.queue!r} is not a queue name: use letters, digits, '_', '-', '.'",
            )
        elif node.queue is not None and not self.stored:
            self.check_reserved_queue(path, node, node.queue)
        concurrency = node.concurrency
        if concurrency is not None and not _key_or_template(concurrency.key):
            self.add(
                f"{path}.concurrency.key",
                f"{concurrency.key!r} is not a key name: use letters, digits, '_', "
                "'-' or '.', at most 128 characters, or a {{ template }}",
            )
        rate = node.rate_limit
        if rate is not None and not _key_or_template(rate.key):
            self.add(
                f"{path}.rate_limit.key",
                f"{rate.key!r} is not a key name: use letters, digits, '_', '-' or '.', at "
                "most 128 characters, or a {{ template }}",
            )
        elif rate is not None and rate.units > rate.limit:
            self.add(
                f"{path}.rate_limit.units",
                f"{rate.units} units per attempt can never fit a bucket of {rate.limit}: at "
                "most limit",
            )

    def check_map_inner(self, i: int, node: Node) -> Node | None:
        """A MAP's inner node, checked as a node of its own (its id: the MAP's): a worker
        node's fields, or a SUB_WORKFLOW's."""
        fields = inner_node_fields(node)
        if fields is None or fields.get("type") not in INNER_TYPES:
            return None  # the kind's check_spec said what is wrong
        path = f"nodes[{i}].spec.node"
        try:
            inner = Node.model_validate(fields)
        except ValidationError as exc:
            for error in exc.errors():
                where = ".".join(str(p) for p in error["loc"])
                self.add(f"{path}.{where}", error["msg"])
            return None
        if kind_of(inner.type).category is Category.WORKER:
            self.check_worker_fields(path, inner)
        else:  # a SUB_WORKFLOW: no worker runs it
            for field in ("queue", "timeout_seconds", "concurrency", "rate_limit"):
                if getattr(inner, field) is not None:
                    self.add(
                        f"{path}.{field}",
                        f"applies only to {_WORKER_TYPES} nodes, not {inner.type}",
                    )
        retry = inner.retry
        if retry is not None and retry.max_seconds < retry.initial_seconds:
            self.add(f"{path}.retry.max_seconds", "must be at least initial_seconds")
        allowed = _SPEC_KEYS.get(inner.type)
        if allowed is not None:
            for key in inner.spec:
                if key not in allowed and key != SECRETS_KEY:
                    self.add(
                        f"{path}.spec.{key}",
                        f"unknown field; {inner.type} takes {', '.join(sorted(allowed))}",
                    )
        kind_of(inner.type).check_spec(self, f"{path}.spec", inner)
        return inner

    def check_reserved_queue(self, path: str, node: Node, queue: str) -> None:
        """The built-in workers run what they lease on ``http`` as an HTTP request and
        on ``python`` as Python code: only that node type may be sent there."""
        owner = RESERVED_QUEUES.get(queue)
        if owner is None or owner is node.type:
            return
        kind = kind_of(node.type)
        if kind.builtin_queue is None:
            fix = (
                f"name a queue of your own that your workers read (e.g. '{node.id}-tasks'); "
                f"{' and '.join(RESERVED_QUEUES)} are the built-in workers'"
            )
        else:
            fix = f"leave queue unset ({node.type} nodes go to {kind.builtin_queue!r})"
        self.add(
            f"{path}.queue",
            f"{queue!r} is reserved for {owner} nodes (the built-in workers run every task on "
            f"it as {kind_of(owner).runs_as}), and this node's type is {node.type}: {fix}",
        )

    def check_edges(self) -> None:
        seen: dict[tuple[str, str], int] = {}
        for i, edge in enumerate(self.spec.edges):
            path = f"edges[{i}]"
            for field, node_id in (("from", edge.source), ("to", edge.target)):
                if node_id not in self.index:
                    self.add(f"{path}.{field}", f"no node {node_id!r}")
            if edge.source == edge.target:
                self.add(path, f"edge from {edge.source!r} to itself")
            key = (edge.source, edge.target)
            if key in seen:
                self.add(
                    path,
                    f"duplicate edge {edge.source} → {edge.target} (first at edges[{seen[key]}])",
                )
            seen.setdefault(key, i)
            source = self.typed(edge.source)
            if (
                edge.condition is not None
                and source is not None
                and not kind_of(source.type).takes_conditions
            ):
                self.add(
                    f"{path}.condition",
                    f"conditions belong on edges out of a {_CONDITION_TYPES}; "
                    f"{edge.source!r} is {source.type}",
                )

    def node(self, node_id: str) -> Node | None:
        i = self.index.get(node_id)
        return None if i is None else self.spec.nodes[i]

    def topological_order(self) -> list[str] | None:
        """Kahn's order over known nodes; reports a cycle and returns None if there is one."""
        targets: dict[str, list[str]] = {n: [] for n in self.index}
        indegree = dict.fromkeys(self.index, 0)
        for edge in self.spec.edges:
            if (
                edge.source in self.index
                and edge.target in self.index
                and edge.source != edge.target
            ):
                targets[edge.source].append(edge.target)
                indegree[edge.target] += 1
        ready = [n for n in self.index if indegree[n] == 0]
        order: list[str] = []
        while ready:
            current = ready.pop(0)
            order.append(current)
            for target in targets[current]:
                indegree[target] -= 1
                if indegree[target] == 0:
                    ready.append(target)
        if len(order) < len(self.index):
            self.add(
                "edges",
                f"the graph has a cycle: {' → '.join(self.find_cycle(targets, set(order)))}",
            )
            return None
        ancestors: dict[str, frozenset[str]] = {}
        sources: dict[str, list[str]] = {n: [] for n in self.index}
        for source, ts in targets.items():
            for t in ts:
                sources[t].append(source)
        for node_id in order:
            acc: set[str] = set()
            for source in sources[node_id]:
                acc.add(source)
                acc |= ancestors[source]
            ancestors[node_id] = frozenset(acc)
        self.ancestors = ancestors
        return order

    @staticmethod
    def find_cycle(targets: Mapping[str, list[str]], acyclic: set[str]) -> list[str]:
        start = next(n for n in targets if n not in acyclic)
        path, seen = [start], {start: 0}
        current = start
        while True:
            current = next(t for t in targets[current] if t not in acyclic)
            if current in seen:
                return [*path[seen[current] :], current]
            seen[current] = len(path)
            path.append(current)

    def check_start(self, order: list[str] | None) -> Node | None:
        # A self-loop is reported on its edge; it does not make its node a non-root.
        targets = {e.target for e in self.spec.edges if e.source != e.target}
        roots = [n for n in self.index if n not in targets]
        start_id = self.spec.start
        if start_id is not None:
            if start_id not in self.index:
                self.add("start", f"no node {start_id!r}")
                return None
        elif len(roots) == 1:
            start_id = roots[0]
        else:
            if roots:
                self.add(
                    "start",
                    f"{len(roots)} nodes have no incoming edge ({', '.join(roots)}): "
                    "connect them or name the one to start at in `start`",
                )
            elif order is not None:
                self.add("start", "every node has an incoming edge: there is no node to start at")
            return None
        if order is None:
            return self.node(start_id)
        reachable = {start_id, *(n for n in self.index if start_id in self.ancestors.get(n, ()))}
        for node_id in self.index:
            if node_id not in reachable:
                self.add(
                    f"nodes[{self.index[node_id]}]",
                    f"node {node_id!r} cannot be reached from the start node {start_id!r}",
                )
        return self.node(start_id)

    # -- per-type specs ----------------------------------------------------

    def check_node_spec(self, i: int, node: Node) -> None:
        path = f"nodes[{i}].spec"
        spec = node.spec
        allowed = _SPEC_KEYS.get(node.type)
        if SECRETS_KEY in spec:
            self.add(
                f"{path}.{SECRETS_KEY}",
                f"{SECRETS_KEY!r} is reserved: Composer writes it into a node's input to say "
                "where its secret references are",
            )
        if i in self.untyped:
            return  # what its spec takes depends on the type, which is unknown
        if allowed is not None:
            for key in spec:
                if key not in allowed and key != SECRETS_KEY:
                    hint = (
                        f"; {node.type} takes {', '.join(sorted(allowed))}"
                        if allowed
                        else f"; {node.type} takes no spec"
                    )
                    self.add(f"{path}.{key}", f"unknown field{hint}")
        kind_of(node.type).check_spec(self, path, node)

    def has_outgoing(self, node_id: str) -> bool:
        return any(e.source == node_id for e in self.spec.edges)

    def check_seconds(self, path: str, value: Any) -> None:
        if isinstance(value, str) and templated(value):
            return
        if parse_seconds(value) is None:
            self.add(path, f"must be a number of seconds from 0 to {MAX_SECONDS}, got {value!r}")

    # -- templates ---------------------------------------------------------

    def compile_nodes(self) -> dict[str, CompiledNode]:
        compiled: dict[str, CompiledNode] = {}
        for i, node in enumerate(self.spec.nodes):
            if self.index.get(node.id) != i or i in self.too_deep:
                continue
            path = f"nodes[{i}].spec"
            kind = kind_of(node.type)
            value = compile_value(
                node.spec,
                self.engine,
                path=path,
                on_error=self.template_error,
                verbatim=kind.verbatim,
            )
            refused = None if i in self.untyped else kind.refuses_secrets
            for where, reference in value.located_secrets(path):
                if refused is not None:
                    self.add(where, f"{reference.text}: {refused}")
            refs = self.check_references(
                value.located(path), node.id, secret_refused=refused or _SECRET_COMPUTED
            )
            if kind.takes_conditions:
                # It passes on its predecessor's output and reads its conditions' refs.
                preds = frozenset(e.source for e in self.spec.edges if e.target == node.id)
                cond_refs: References = References()
                for edge in self.spec.edges:
                    if edge.source == node.id and edge.condition:
                        with contextlib.suppress(TemplateError):  # compile_conditions reports it
                            compiled_condition = compile_condition(edge.condition, self.engine)
                            cond_refs = cond_refs | compiled_condition.references
                ids = (
                    None
                    if refs is None or cond_refs.task_ids is None
                    else refs | cond_refs.task_ids | preds
                )
                refs = ids
            item = None
            if kind.category is Category.MAP and i not in self.untyped:
                inner = self.check_map_inner(i, node)
                if inner is not None:
                    inner_path = f"{path}.node.spec"
                    inner_kind = kind_of(inner.type)
                    item = compile_value(
                        inner.spec,
                        self.engine,
                        path=inner_path,
                        on_error=self.template_error,
                        verbatim=inner_kind.verbatim,
                    )
                    for where, reference in item.located_secrets(inner_path):
                        if inner_kind.refuses_secrets is not None:
                            self.add(where, f"{reference.text}: {inner_kind.refuses_secrets}")
                    item_refs = self.check_references(
                        item.located(inner_path),
                        node.id,
                        secret_refused=inner_kind.refuses_secrets or _SECRET_COMPUTED,
                        more_roots=ITEM_ROOTS,
                    )
                    refs = None if refs is None or item_refs is None else refs | item_refs
                    worker = inner
                else:
                    worker = None
            elif kind.category is Category.WORKER and i not in self.untyped:
                worker = node
            else:
                worker = None
            concurrency_key = rate_key = None
            if worker is not None:
                key_roots = ITEM_ROOTS if worker is not node else frozenset()
                where = f"nodes[{i}]" if worker is node else f"nodes[{i}].spec.node"
                if worker.concurrency is not None:
                    concurrency_key, key_refs = self.compile_key(
                        worker.concurrency.key, f"{where}.concurrency.key", node.id, key_roots
                    )
                    refs = None if refs is None or key_refs is None else refs | key_refs
                if worker.rate_limit is not None:
                    rate_key, key_refs = self.compile_key(
                        worker.rate_limit.key, f"{where}.rate_limit.key", node.id, key_roots
                    )
                    refs = None if refs is None or key_refs is None else refs | key_refs
            compiled[node.id] = CompiledNode(value, refs, item, concurrency_key, rate_key)
        return compiled

    def compile_key(
        self, key: str, path: str, reader: str, more_roots: frozenset[str]
    ) -> tuple[CompiledValue | None, frozenset[str] | None]:
        """A limit key that is a template, compiled (None: a plain name), and the task
        outputs it reads; rendered when each task is created."""
        if not templated(key):
            return None, frozenset()
        before = len(self.problems)
        value = compile_value(key, self.engine, path=path, on_error=self.template_error)
        if len(self.problems) != before:
            return None, frozenset()
        for where, reference in value.located_secrets(path):
            self.add(where, f"{reference.text}: a limit key cannot hold a secret")
        refs = self.check_references(
            value.located(path),
            reader,
            secret_refused="a limit key cannot hold a secret",
            more_roots=more_roots,
        )
        return value, refs

    def compile_conditions(self) -> dict[tuple[str, str], Expression]:
        conditions: dict[tuple[str, str], Expression] = {}
        for i, edge in enumerate(self.spec.edges):
            if not edge.condition:
                continue
            path = f"edges[{i}].condition"
            try:
                expression = compile_condition(edge.condition, self.engine)
            except TemplateError as exc:
                self.add(path, str(exc))
                continue
            self.check_references(
                [(path, expression)], edge.source, secret_refused=_SECRET_IN_CONDITION
            )
            conditions[(edge.source, edge.target)] = expression
        return conditions

    def compile_output(self) -> tuple[CompiledValue | None, frozenset[str] | None]:
        if self.spec.output is None or -1 in self.too_deep:
            return None, frozenset()
        value = compile_value(
            self.spec.output, self.engine, path="output", on_error=self.template_error
        )
        for where, reference in value.located_secrets("output"):
            self.add(where, f"{reference.text}: {_SECRET_IN_OUTPUT}")
        refs = self.check_references(
            value.located("output"), None, secret_refused=_SECRET_IN_OUTPUT
        )
        return value, refs

    def compile_flow(self) -> CompiledFlow | None:
        """The run-level ``concurrency`` and ``priority``: templates over input and config
        only (a run has nothing else when it starts); literals checked here."""
        spec = self.spec
        if spec.concurrency is None and spec.priority is None:
            return None

        def compiled(value: object, path: str) -> CompiledValue:
            before = len(self.problems)
            result = compile_value(value, self.engine, path=path, on_error=self.template_error)
            if len(self.problems) == before:
                for where, expression in result.located(path):
                    for root in sorted(expression.references.roots - FLOW_ROOTS):
                        self.add(
                            where,
                            f"{root!r} is not known when a run starts: {path} may read "
                            "input and config only",
                        )
                for where, reference in result.located_secrets(path):
                    self.add(where, f"{reference.text}: {path} cannot hold a secret")
            return result

        def literal(value: object, path: str, low: int, high: int | None) -> None:
            if isinstance(value, bool) or (
                isinstance(value, int) and (value < low or (high is not None and value > high))
            ):
                bounds = f"from {low} to {high}" if high is not None else f"at least {low}"
                self.add(path, f"must be a whole number {bounds} or a template, not {value!r}")
            elif isinstance(value, str) and "{{" not in value:
                self.add(path, f"{value!r} is neither a whole number nor a {{{{ template }}}}")

        priority = None
        if spec.priority is not None:
            literal(spec.priority, "priority", HIGHEST_PRIORITY, LOWEST_PRIORITY)
            priority = compiled(spec.priority, "priority")
        concurrency = spec.concurrency
        if concurrency is None:
            return CompiledFlow(None, None, Strategy.QUEUE, priority)
        literal(concurrency.max_runs, "concurrency.max_runs", 1, None)
        key = None
        if concurrency.key is not None:
            if not concurrency.key.strip():
                self.add(
                    "concurrency.key",
                    "is empty: write a template such as "
                    '"{{input.customer}}", or leave key out for one key',
                )
            key = compiled(concurrency.key, "concurrency.key")
        return CompiledFlow(
            key,
            compiled(concurrency.max_runs, "concurrency.max_runs"),
            Strategy(concurrency.strategy),
            priority,
        )

    def template_error(self, path: str, exc: TemplateError) -> None:
        self.add(path, str(exc))

    def check_references(
        self,
        located: Iterable[tuple[str, Expression]],
        reader: str | None,
        *,
        secret_refused: str,
        more_roots: frozenset[str] = frozenset(),
    ) -> frozenset[str] | None:
        """Check the roots and task names each expression reads; return their task refs.

        ``reader`` is the node that evaluates them: it may only read outputs of
        nodes upstream of it (None: the run's output, which may read any node).
        An expression reading ``secret`` is refused with ``secret_refused``: a
        secret reference that is the whole template never gets here (it is no
        expression), so this one computes with a secret or sits where none may.
        """
        upstream = self.ancestors.get(reader) if reader is not None else None
        task_ids: set[str] | None = set()
        for path, expression in located:
            if len(expression.source) > self.limits.max_expression_length:
                self.add(
                    path,
                    f"expression of {len(expression.source)} characters; the limit is {self.limits.max_expression_length}",
                )
            refs = expression.references
            if SECRET_ROOT in refs.roots:
                self.add(path, f"{_quote(expression.source)}: {secret_refused}")
            for root in sorted(refs.roots - ROOTS - more_roots - {SECRET_ROOT}):
                self.add(
                    path,
                    f"unknown name {root!r}: expressions start from "
                    f"{', '.join(sorted(ROOTS | more_roots))}",
                )
            if refs.task_ids is None:
                task_ids = None
                continue
            for task_id in sorted(refs.task_ids):
                if task_id not in self.index:
                    self.add(path, f"tasks.{task_id}: no node {task_id!r} in this workflow")
                elif upstream is not None and task_id not in upstream:
                    self.add(
                        path,
                        f"tasks.{task_id}: {task_id!r} is not upstream of {reader!r}, so its output is not there yet when {reader!r} runs",
                    )
            if task_ids is not None:
                task_ids |= refs.task_ids
        return None if task_ids is None else frozenset(task_ids)


def _key_or_template(key: str) -> bool:
    """A limit key as written: a name, or a template rendered per task."""
    return bool(_LIMIT_KEY.fullmatch(key)) or (templated(key) and bool(key.strip()))


def _quote(source: str, limit: int = 80) -> str:
    return repr(source if len(source) <= limit else source[: limit - 1] + "…")
