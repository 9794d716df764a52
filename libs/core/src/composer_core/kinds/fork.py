"""FORK: starts every branch out of it, inline."""

from __future__ import annotations

from composer_core.kinds._kind import ControlKind
from composer_core.kinds._values import SpecModel


class ForkSpec(SpecModel):
    """Starts branches that run in parallel: every edge out of it is taken. Takes no
    spec; its output is ``{}``."""


class Fork(ControlKind):
    name = "FORK"
    spec_model = ForkSpec


FORK = Fork()
