"""The small interface the rest of the core sees of an expression language.

Templates hold CEL today (cel-python); a faster engine can replace it by
implementing these two protocols, and nothing above this module changes.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol

#: A JSON value as Python holds it: None, bool, int, float, str, list, dict.
Json = Any

#: The names an expression may start from (docs/architecture.md §8).
ROOTS = frozenset({"input", "config", "tasks", "system", "run"})


@dataclass(frozen=True, slots=True)
class References:
    """What an expression reads.

    ``task_ids`` is the set of nodes whose ``tasks.<id>`` it names, or None when
    it indexes ``tasks`` in a way that cannot be read statically
    (``tasks[input.step]``): then every reached output may be needed.
    """

    roots: frozenset[str] = frozenset()
    task_ids: frozenset[str] | None = frozenset()

    def __or__(self, other: References) -> References:
        task_ids = (
            None
            if self.task_ids is None or other.task_ids is None
            else self.task_ids | other.task_ids
        )
        return References(self.roots | other.roots, task_ids)


class Expression(Protocol):
    """A compiled expression: evaluate it as often as needed."""

    @property
    def source(self) -> str: ...

    @property
    def references(self) -> References: ...

    def evaluate(self, activation: Mapping[str, object]) -> Json:
        """Evaluate against values made by the engine's ``to_native``/``map_of``.

        Returns plain JSON types; raises TemplateError with a message a user can act on.
        """
        ...


class ExpressionEngine(Protocol):
    def compile(self, source: str) -> Expression:
        """Compile one expression; raise TemplateError if it does not parse."""
        ...

    def to_native(self, value: Json) -> object:
        """Convert a JSON value (datetimes allowed) into the engine's own value."""
        ...

    def map_of(self, entries: Mapping[str, object]) -> object:
        """Build a map from values already converted by ``to_native``."""
        ...
