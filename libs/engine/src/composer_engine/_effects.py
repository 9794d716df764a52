"""What a committed transition announces, collected while it is persisted.

A leaf module: the persistence of actions (``_persist``) and of the writes held
back to the end of the transaction (``_writes``) both add to it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import composer_repo as repo
from composer_core.statemachine import FinishRun


@dataclass(slots=True)
class Effects:
    """What a committed transition should announce (collected while persisting)."""

    #: A delayed dispatch was written: the enqueuer should look at when it is due.
    wake_enqueuer: bool = False
    wrote_webhook: bool = False
    wake_timer: bool = False
    finished: FinishRun | None = None
    #: What the metrics record once the transaction commits.
    created: list[tuple[str, str]] = field(default_factory=list)  # (node type, state)
    completed: list[tuple[str, float | None]] = field(default_factory=list)  # (node type, seconds)
    failed: list[str] = field(default_factory=list)
    retried: int = 0
    finished_run: repo.FinishedRun | None = None
