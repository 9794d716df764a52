"""The node kinds' one table (composer_core.kinds): every kind is registered once, under
its own name, and what the rest of Composer reads from a kind agrees with it."""

from __future__ import annotations

import pytest

from composer_core.kinds import (
    BUILTIN_QUEUES,
    KINDS,
    RESERVED_QUEUES,
    Category,
    ChildKind,
    ControlKind,
    MapKind,
    NodeKind,
    NodeType,
    WaitKind,
    WorkerKind,
    kind_of,
)
from composer_core.model import NODE_SPECS


def test_every_node_type_has_one_kind_registered_under_its_own_name() -> None:
    assert list(KINDS) == list(NodeType)
    for node_type, kind in KINDS.items():
        assert kind.name == node_type.value
        assert kind_of(node_type) is kind is node_type.kind
    assert len({id(kind) for kind in KINDS.values()}) == len(KINDS)


@pytest.mark.parametrize("node_type", list(NodeType))
def test_a_kinds_category_is_the_one_its_base_class_gives(node_type: NodeType) -> None:
    kind = KINDS[node_type]
    base: type[NodeKind] = {
        Category.WORKER: WorkerKind,
        Category.CONTROL: ControlKind,
        Category.WAIT: WaitKind,
        Category.SUB_WORKFLOW: ChildKind,
        Category.MAP: MapKind,
    }[kind.category]
    assert isinstance(kind, base)
    assert node_type.is_worker is (kind.category is Category.WORKER)
    assert node_type.is_control is (kind.category is Category.CONTROL)
    assert node_type.is_wait is (kind.category is Category.WAIT)


def test_the_categories_of_the_built_in_kinds() -> None:
    by_category = {c: {t.value for t, k in KINDS.items() if k.category is c} for c in Category}
    # at least these: a new kind adds to its category without changing this test
    assert by_category[Category.WORKER] >= {"HTTP", "PYTHON", "TASK"}
    assert by_category[Category.CONTROL] >= {"SWITCH", "FORK", "JOIN"}
    assert by_category[Category.WAIT] >= {"WAIT", "WAIT_FOR_EVENT"}


def test_the_spec_models_and_reserved_queues_come_from_the_kinds() -> None:
    assert {t: k.spec_model for t, k in KINDS.items()} == dict(NODE_SPECS)
    assert dict(BUILTIN_QUEUES) == {NodeType.HTTP: "http", NodeType.PYTHON: "python"}
    assert dict(RESERVED_QUEUES) == {"http": NodeType.HTTP, "python": NodeType.PYTHON}
    for queue, node_type in RESERVED_QUEUES.items():
        assert KINDS[node_type].runs_as, f"{queue} needs what its workers run a task as"


def test_only_worker_kinds_name_queues_and_only_kinds_that_take_secrets_say_nothing() -> None:
    for kind in KINDS.values():
        if kind.builtin_queue is not None or kind.own_queue:
            assert kind.category is Category.WORKER
        if kind.refuses_secrets is None:  # the built-in workers resolve them at run time
            assert kind.builtin_queue is not None
