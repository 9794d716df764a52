"""The state machine's Store, backed by the run's rows inside the event's transaction."""

from __future__ import annotations

from collections.abc import Collection, Mapping

from composer_core.statemachine import Signal
from composer_core.templates import Json
from composer_repo._db import Connection
from composer_repo._runs import load_outputs
from composer_repo._signals import pending_signal


class RunStore:
    """Read access the machine needs on demand, for one locked run.

    Make one per event with the connection of that event's transaction (after
    ``load_run`` took the lock), and pass it in the machine's Deps.
    """

    __slots__ = ("_conn", "_run_id")

    def __init__(self, conn: Connection, run_id: str) -> None:
        self._conn = conn
        self._run_id = run_id

    async def outputs(self, node_ids: Collection[str]) -> Mapping[str, Json]:
        return await load_outputs(self._conn, self._run_id, node_ids)

    async def pending_signal(self, name: str, exclude: Collection[str]) -> Signal | None:
        return await pending_signal(self._conn, self._run_id, name, exclude)
