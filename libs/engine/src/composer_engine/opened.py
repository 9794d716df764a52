"""Stored documents opened where they are used (composer_engine.sealing).

The machine decides on opened values: the snapshot's input, config and node
errors, the outputs and buffered signals it asks for. The API answers with
opened records. Nothing else opens a document, so a value is in the clear only
in the process and at the moment that needs it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping

import composer_repo as repo
from composer_core.statemachine import Run, Signal
from composer_core.templates import Json
from composer_engine.sealing import PREFIX, KeyUnavailable, Sealer, SealingError


def snapshot(sealer: Sealer, run: Run) -> Run:
    """The machine's snapshot with its documents opened (a plain one is itself)."""
    run_id = run.run_id
    nodes = run.nodes
    if any(_sealed(n.error) for n in nodes.values()):
        nodes = {
            node_id: (
                dataclasses.replace(n, error=sealer.open_text(run_id, n.error))
                if _sealed(n.error)
                else n
            )
            for node_id, n in nodes.items()
        }
    if not (_sealed(run.input) or _sealed(run.config) or nodes is not run.nodes):
        return run
    return dataclasses.replace(
        run,
        input=sealer.open(run_id, run.input),
        config=sealer.open(run_id, run.config),
        nodes=nodes,
    )


def outputs(sealer: Sealer, run_id: str, loaded: Mapping[str, Json]) -> dict[str, Json]:
    return {node_id: sealer.open(run_id, value) for node_id, value in loaded.items()}


def signals(sealer: Sealer, run_id: str, loaded: tuple[Signal, ...]) -> tuple[Signal, ...]:
    return tuple(
        dataclasses.replace(s, payload=sealer.open(run_id, s.payload)) if _sealed(s.payload) else s
        for s in loaded
    )


# -- what the API shows ---------------------------------------------------------------


def shown(sealer: Sealer, run_id: str, value: Json) -> Json:
    """A document as the API shows it: opened; one that does not open here is a
    string that says why (the answer is still given, with the rest of the record)."""
    try:
        return sealer.open(run_id, value)
    except KeyUnavailable as exc:
        return f"<sealed with key {exc.key_id!r}, which this api-gateway does not have>"
    except SealingError as exc:
        return f"<sealed: {exc}>"


def shown_text(sealer: Sealer, run_id: str, value: str | None) -> str | None:
    opened = shown(sealer, run_id, value)
    assert opened is None or isinstance(opened, str)
    return opened


def run_record(sealer: Sealer, record: repo.RunRecord) -> repo.RunRecord:
    run_id = record.run_id
    return dataclasses.replace(
        record,
        input=shown(sealer, run_id, record.input),
        config=shown(sealer, run_id, record.config),
        output=shown(sealer, run_id, record.output),
        error=shown_text(sealer, run_id, record.error),
        context=shown(sealer, run_id, record.context),
    )


def task_record(sealer: Sealer, run_id: str, record: repo.TaskRecord) -> repo.TaskRecord:
    return dataclasses.replace(
        record,
        input=shown(sealer, run_id, record.input),
        output=shown(sealer, run_id, record.output),
        error=shown_text(sealer, run_id, record.error),
    )


def buffered_signal(sealer: Sealer, run_id: str, s: repo.BufferedSignal) -> repo.BufferedSignal:
    return dataclasses.replace(s, payload=shown(sealer, run_id, s.payload))


def _sealed(value: object) -> bool:
    return isinstance(value, str) and value.startswith(PREFIX)


def task_log(sealer: Sealer, run_id: str, record: repo.TaskLogRecord) -> repo.TaskLogRecord:
    """An attempt's log as the API shows it: its lines opened (or why they do not)."""
    lines = shown_text(sealer, run_id, record.lines)
    return dataclasses.replace(record, lines=lines or "")
