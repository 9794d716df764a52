"""JOIN: goes on once every incoming edge is resolved, inline."""

from __future__ import annotations

from composer_core.kinds._kind import ControlKind
from composer_core.kinds._values import SpecModel


class JoinSpec(SpecModel):
    """Waits for every incoming edge to resolve (a branch that was skipped counts as
    resolved) and goes on if any was taken. Takes no spec; its output is ``{}``."""


class Join(ControlKind):
    name = "JOIN"
    spec_model = JoinSpec


JOIN = Join()
