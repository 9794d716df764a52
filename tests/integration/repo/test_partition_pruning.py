"""Run-scoped statements touch one monthly partition (the plan names only one).

Every statement on a partitioned table is classified here: pruned to the run's
partition (checked on its plan), or deliberately wider (the background
loops' scans of small partial indexes, inserts routed by their row, …). A new
statement must be added to one list or the other.
"""

from __future__ import annotations

import datetime as dt
import re
from typing import Any

import pytest

import composer_repo as repo
from composer_repo._sql import QUERIES

from .helpers import new_run, uuid7

NOW = dt.datetime(2030, 1, 1, tzinfo=dt.UTC)
T = "01900000-0000-7000-8000-000000000000"  # any task id

#: Statements that filter on one run id, with sample arguments after the run id.
PRUNED: dict[str, tuple[Any, ...]] = {
    "lock_run": (),
    "load_task_states": (),
    "load_map_items_of_run": (),
    "load_outputs": (["a"],),
    "reopen_run": (1, None, None),
    "delete_tasks": (["a"],),
    "get_run": (),
    "get_run_tasks": (),
    "fail_task": (T, "a", 0, "e", None),
    "requeue_task": (T, "a", 0, "e", None, NOW),
    "cancel_tasks": ([T], "r"),
    "lease_holder": (T, 0),
    "pending_signals": (),
    "consume_signal": (T, "node"),
    "run_signals": (),
    "redispatch_task": (T, 0),
    "park_task": (T, 0, "token", dt.timedelta(minutes=5), "parked"),
    "set_data_key": ("k1:key",),
    "try_lock_run": (),
    "lock_expired_lease": (T, 0, "w"),
    "park_wait": (T, NOW),
    "record_cancelled_by": ("name",),
    "record_retried_by": ("name",),
    "record_signal_sender": (T, "name"),
    "get_task_logs": (None,),
    "unserved_queues": (30.0,),
    "set_run_parent": ("p", "node", T, 0),
    "release_task": (T, 0),
    "start_waiting_run": (),
    "set_run_priority": (2,),
    "run_depth": (),
    "start_child_task": (T, "a", 0),
    "pause_run": (),
    "resume_run": (),
    "hold_run_tasks": (None, "paused"),
    "release_run_tasks": ("paused",),
    "load_items": ("m", [0, 1]),
    "load_item_outputs": ("m",),
    "cancel_items": ("m", "r"),
    "get_map_items": ("m", 0, 100),
}

#: Statements on partitioned tables that do not (and need not) name one run.
WIDER = {
    "insert_run": "INSERT: the row is routed to its partition",
    "insert_runs": "INSERT of a batch: each row is routed to its partition",
    "insert_task": "INSERT: the row is routed to its partition",
    "buffer_signal": "INSERT: the row is routed to its partition",
    "record_taken_signal": "INSERT: the row is routed to its partition",
    "find_idempotent_run": "joins from the key row: pruned at run time",
    "settle_child_starts": "joins from a paused run's held child starts: pruned at run time",
    "mark_published": "a batch of (run id, task id) pairs",
    "resolve_waits": "a batch of (run id, task id) pairs",
    "finish_runs": "a batch of run ids",
    "lock_runs": "a batch of run ids (the group commit)",
    "load_task_states_of_runs": "a batch of run ids (the group commit)",
    "load_map_items_of_runs": "a batch of run ids (the group commit's runs with a MAP)",
    "acquire_leases": "a batch of (run id, task id) pairs",
    "complete_tasks": "a batch of (run id, task id) pairs (the group commit)",
    "insert_tasks": "INSERT: the rows are routed to their partitions",
    "renew_leases": "a batch of (run id, task id) pairs",
    "list_runs": "an id range (cursor, created range), which prunes when bounded",
    "list_runs_by_workflow": "an id range",
    "list_runs_by_status": "an id range",
    "list_runs_by_schedule": "an id range, on the schedule's partial index",
    "run_statuses": "a batch of run ids (schedules' last runs)",
    "list_runs_by_workflow_status": "an id range",
    "due_waits": "the timer scans the small wake_at partial index of every month",
    "next_wake_at": "the timer scans the small wake_at partial index of every month",
    "expired_leases": "the sweeper scans the small in-flight partial index of every month",
    "lost_dispatches": "the sweeper scans the small in-flight partial index of every month",
    "task_attempts": "a batch of (run id, task id) pairs",
    "task_routing": "a batch of (run id, task id) pairs (refused leases only)",
    "count_active_runs": "an id range: one month, by the partition-manager",
    "insert_task_logs": "INSERT: the rows are routed to their partitions",
    "active_children": "a parent's children may be of any month: the small parent index",
    "active_children_of_tasks": "a parent's children may be of any month: the small parent index",
    "queue_load": "the admission step counts the small in-flight and held partial indexes",
    "held_tasks": "a release scans the small held partial index of every month (and runs)",
    "hold_tasks": "a batch of (run id, task id) pairs",
    "enqueue_dispatches": "each dispatch's run by its key (a subquery: pruned at run time)",
    "insert_child_run": "INSERT: the row is routed to its partition",
    "first_child_version": "a parent's children may be of any month: the small parent index",
    "run_children": "a parent's children may be of any month: the small parent index",
    "list_runs_labelled": "an id range, with the labels' GIN index",
    "list_runs_by_workflow_labelled": "an id range, with the labels' GIN index",
    "list_runs_by_status_labelled": "an id range, with the labels' GIN index",
    "list_runs_by_workflow_status_labelled": "an id range, with the labels' GIN index",
    "set_task_limits": "a batch of (run id, task id) pairs",
    "task_limit_keys": "a batch of (run id, task id) pairs (a templated node's tasks sent again)",
    "limit_load": "a key's count: the small in-flight and held partial indexes of limited rows",
    "held_limit_tasks": "a release scans the small held partial index of limited rows (and runs)",
    "held_limit_keys": "the sweeper scans the small held partial index of limited rows",
    "node_limit_keys": "GET /v1/limits: the small partial indexes of limited rows",
    "start_items": "a batch of (run id, task id) pairs (MAP items that go)",
    "set_map_progress": "a batch of (run id, task id) pairs (MAP progress)",
    "rate_held_load": "a rate key's count: the small held partial index of rated rows",
    "held_rate_tasks": "a release scans the small held partial index of rated rows (and runs)",
    "held_rate_keys": "the sweeper scans the small held partial index of rated rows",
    "rate_limit_keys": "GET /v1/limits: per bucket, the small held partial index",
}

PARTITIONED = re.compile(r"\b(workflow_runs|task_instances|workflow_events|task_logs)\b")
PARTITION = re.compile(r"\b(?:workflow_runs|task_instances|workflow_events|task_logs)_p\d{6}\b")


def test_every_statement_on_a_partitioned_table_is_classified() -> None:
    touching = {name for name, sql in QUERIES.items() if PARTITIONED.search(sql)}
    touching -= {"ensure_partitions", "drop_partitions", "list_partitions"}
    unclassified = sorted(touching - PRUNED.keys() - WIDER.keys())
    assert unclassified == [], "add these to PRUNED or WIDER in test_partition_pruning.py"


@pytest.mark.parametrize("name", sorted(n for n in PRUNED if n in QUERIES))
async def test_statement_touches_one_partition(conn: repo.Connection, name: str) -> None:
    run_id = await new_run(conn) if name != "pending_signals" else uuid7()
    plan = await conn.fetch("EXPLAIN " + QUERIES[name], run_id, *PRUNED[name])
    text = "\n".join(r[0] for r in plan)

    partitions = set(PARTITION.findall(text))

    assert len({p.rsplit("_p", 1)[1] for p in partitions}) == 1, text
