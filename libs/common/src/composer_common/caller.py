"""The calling context of a run: who started it, and the metadata they passed.

One document shape, written by the api-gateway when a run starts, stored with
the run (``workflow_runs.context``), copied onto its TASK nodes' rows, sent
with each lease and read back by the SDK as ``ctx.caller``:

    {"caller": {"name": "ci", "role": "operator"}, "metadata": {"ticket": "OPS-1"}}

It lives here, in the library the SDK shares with the services, so both ends
of that trip read the same shape.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

#: COMPOSER_MAX_CONTEXT_BYTES: the request metadata a start may carry, as JSON (the
#: gateway). Small on purpose: it is copied onto every TASK node's row and sent with
#: every lease of the run.
DEFAULT_MAX_CONTEXT_BYTES = 16 * 1024


@dataclass(frozen=True, slots=True)
class Caller:
    """Who started a run (the name and role of their API token) and the request
    metadata they chose to pass with the start (``{}`` when none)."""

    name: str
    role: str
    metadata: Mapping[str, Any] = field(default_factory=lambda: MappingProxyType({}))

    def document(self) -> dict[str, Any]:
        """The stored form (``workflow_runs.context``)."""
        return {"caller": {"name": self.name, "role": self.role}, "metadata": dict(self.metadata)}

    @classmethod
    def from_document(cls, document: object) -> Caller | None:
        """The caller a stored context document names; None for no document (a run
        started by no token: an engine call, a test) or one of another shape."""
        if not isinstance(document, Mapping):
            return None
        caller = document.get("caller")
        if not isinstance(caller, Mapping):
            return None
        name, role = caller.get("name"), caller.get("role")
        if not isinstance(name, str) or not isinstance(role, str):
            return None
        metadata = document.get("metadata")
        return cls(
            name, role, MappingProxyType(dict(metadata) if isinstance(metadata, Mapping) else {})
        )
