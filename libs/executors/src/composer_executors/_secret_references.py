"""Putting secret values into a node's input just before the call, and keeping them out of
what the node reports.

The engine renders ``{{ secret.NAME }}`` as that text and lists every place
it wrote one under the input's top-level ``$secrets`` key (composer_core,
templates/_secrets.py; docs/secrets.md)::

    {"headers": {"Authorization": "Bearer {{secret.API_TOKEN}}"},
     "$secrets": [{"path": ["headers", "Authorization"], "at": 7, "name": "API_TOKEN"}]}

Only those places are resolved: the same text anywhere else (a run's input,
a signal, an earlier node's output) is data and stays as it is. A place that
does not hold the reference it names means the stored input was changed
after the engine wrote it: the node fails rather than guess. An HTTP node's
input also names, under ``$origin``, the one origin its secrets may go to
(its definition's literal ``scheme://host[:port]``); ``_http`` holds the
request to it.

The values then stay out of everything the node hands back: every string of
its output and its error message has each value (raw, URL-encoded and
JSON-escaped) replaced by the reference, and an error's cause is cut off.
That is a safety net for a server that echoes a header or code that returns
what it was given, not a promise: an encoded form (base64, a hash) is not
recognised.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar
from urllib.parse import quote, quote_plus

from yarl import URL

from composer_executors._errors import (
    ExecutionError,
    HttpStatusError,
    InvalidSpec,
    SecretNotFound,
)
from composer_executors._secret_sources import SECRET_NAME, SecretChain, SecretSource
from composer_rpc.codes import ErrorCode

#: The top-level key of a node's input that lists its secret references.
SECRETS_KEY = "$secrets"
#: The top-level key of an HTTP node's input naming the origin its secrets may go to.
ORIGIN_KEY = "$origin"

T = TypeVar("T")
Path = tuple[str | int, ...]


def reference_text(name: str) -> str:
    """``{{secret.NAME}}``, as the engine writes a reference (and as a scrubbed value reads)."""
    return "{{secret." + name + "}}"


@dataclass(frozen=True, slots=True)
class _Spot:
    path: Path
    at: int
    name: str

    @property
    def shown(self) -> str:
        return ".".join(str(p) for p in self.path) or "(the input)"


class Resolved:
    """A node's input with its secrets in place, and the means to keep them out of reports."""

    def __init__(self, spec: Any, values: Mapping[str, str]) -> None:
        #: The input to run, without ``$secrets``; holds the values: never report it.
        self.spec = spec
        self._names = tuple(values)
        forms: dict[str, str] = {}
        for name, value in values.items():
            for form in _forms(value):
                forms.setdefault(form, reference_text(name))
        # Longest first: a value that contains another is replaced whole.
        self._forms = sorted(forms.items(), key=lambda item: -len(item[0]))

    @property
    def names(self) -> tuple[str, ...]:
        """The secrets resolved, in the order the input names them."""
        return self._names

    def holds(self, text: str) -> bool:
        """Whether ``text`` holds a resolved value, as it is or encoded as a URL or JSON would."""
        return any(form in text for form, _ in self._forms)

    def scrub_text(self, text: str) -> str:
        for form, reference in self._forms:
            if form in text:
                text = text.replace(form, reference)
        return text

    def scrub(self, value: Any) -> Any:
        """``value`` (JSON) with every secret value in its strings and keys replaced."""
        if not self._forms:
            return value
        if isinstance(value, str):
            return self.scrub_text(value)
        if isinstance(value, dict):
            return {self.scrub_text(str(k)): self.scrub(v) for k, v in value.items()}
        if isinstance(value, list | tuple):
            return [self.scrub(v) for v in value]
        return value

    def scrubbed(self, exc: ExecutionError) -> ExecutionError:
        """``exc`` with the values out of its message, and no cause that may hold them."""
        exc.message = self.scrub_text(exc.message)
        exc.args = (exc.message,)
        if isinstance(exc, HttpStatusError):
            exc.excerpt = self.scrub_text(exc.excerpt)
        exc.__cause__ = None
        exc.__context__ = None
        exc.__suppress_context__ = True
        return exc.with_traceback(None)


async def resolve_secrets(spec: Any, source: SecretSource | None) -> Resolved:
    """``spec`` with the value of each secret reference its ``$secrets`` lists put in place.

    Without ``$secrets`` the spec is returned as it is; with it, the result has neither
    ``$secrets`` nor ``$origin``. Raises
    :class:`SecretNotFound` for a name ``source`` does not hold (None: no source),
    :class:`InvalidSpec` for a ``$secrets`` that does not match its input.
    """
    if not isinstance(spec, Mapping) or SECRETS_KEY not in spec:
        return Resolved(spec, {})
    spots = _spots(spec[SECRETS_KEY])
    body: Any = {k: v for k, v in spec.items() if k not in (SECRETS_KEY, ORIGIN_KEY)}
    source = source if source is not None else SecretChain(())
    values: dict[str, str] = {}
    for spot in spots:
        if spot.name not in values:
            value = await source.get(spot.name)
            if value is None:
                raise SecretNotFound(spot.name, source.where(spot.name))
            values[spot.name] = value
    by_path: dict[Path, list[_Spot]] = {}
    for spot in spots:
        by_path.setdefault(spot.path, []).append(spot)
    for path, group in by_path.items():
        body = _replaced(body, path, group, values)
    return Resolved(body, values)


async def run_with_secrets(
    spec: Any,
    source: SecretSource | None,
    run: Callable[[Any], Awaitable[T]],
    *,
    on_resolved: Callable[[Resolved], None] | None = None,
) -> T:
    """``run`` on ``spec`` with its secrets resolved; its result and its failure scrubbed.

    Every failure comes out as an :class:`ExecutionError` whose message holds no
    value (an unexpected exception too, as the SDK would report it: code
    ``exception``, retryable). ``on_resolved`` gets the resolved secrets before
    ``run`` starts, to scrub what ``run`` passes on as it goes (printed lines).
    """
    resolved = await resolve_secrets(spec, source)
    if on_resolved is not None:
        on_resolved(resolved)
    if not resolved.names:
        return await run(resolved.spec)
    failure: ExecutionError
    try:
        result = await run(resolved.spec)
    except ExecutionError as exc:
        failure = resolved.scrubbed(exc)
    except Exception as exc:
        failure = ExecutionError(
            resolved.scrub_text(f"{type(exc).__name__}: {exc}"), code=ErrorCode.EXCEPTION
        )
    else:
        return resolved.scrub(result)  # type: ignore[no-any-return]
    raise failure


def _spots(raw: Any) -> list[_Spot]:
    def bad(why: str) -> InvalidSpec:
        return InvalidSpec(
            f"the input's {SECRETS_KEY} {why}; Composer writes it when it renders a node's "
            "secret references, and it must not be changed"
        )

    if not isinstance(raw, list):
        raise bad("is not a list")
    spots: list[_Spot] = []
    for item in raw:
        if not isinstance(item, Mapping):
            raise bad("holds an entry that is not an object")
        path, at, name = item.get("path"), item.get("at"), item.get("name")
        if not isinstance(name, str) or not SECRET_NAME.fullmatch(name):
            raise bad(f"names {name!r}, which is not a secret name")
        if not isinstance(at, int) or isinstance(at, bool) or at < 0:
            raise bad(f"places {name!r} at {at!r}, which is not an offset")
        if not isinstance(path, list) or not all(
            isinstance(p, str) or (isinstance(p, int) and not isinstance(p, bool)) for p in path
        ):
            raise bad(f"places {name!r} at path {path!r}, which is not a list of keys and indexes")
        spots.append(_Spot(tuple(path), at, name))
    return spots


def _replaced(node: Any, path: Path, spots: list[_Spot], values: Mapping[str, str]) -> Any:
    """``node`` with the spots of the string at ``path`` resolved, copying only the
    containers on the way there."""
    if not path:
        if not isinstance(node, str):
            raise InvalidSpec(
                f"the input's {SECRETS_KEY} places {spots[0].name!r} at {spots[0].shown}, "
                "which is not a string"
            )
        return _spliced(node, spots, values)
    key, rest = path[0], path[1:]
    if isinstance(node, dict) and isinstance(key, str) and key in node:
        copy = dict(node)
        copy[key] = _replaced(node[key], rest, spots, values)
        return copy
    if isinstance(node, list) and isinstance(key, int) and 0 <= key < len(node):
        items = list(node)
        items[key] = _replaced(node[key], rest, spots, values)
        return items
    raise InvalidSpec(
        f"the input's {SECRETS_KEY} places {spots[0].name!r} at {spots[0].shown}, "
        "which is not in the input"
    )


def _spliced(text: str, spots: Iterable[_Spot], values: Mapping[str, str]) -> str:
    """``text`` with each spot's reference replaced by its value, checked first."""
    ordered = sorted(spots, key=lambda s: s.at)
    end = 0
    for spot in ordered:
        reference = reference_text(spot.name)
        if spot.at < end or text[spot.at : spot.at + len(reference)] != reference:
            raise InvalidSpec(
                f"the input's {SECRETS_KEY} places {reference} at {spot.shown} offset "
                f"{spot.at}, which does not hold it: the stored input was changed after "
                "Composer rendered it"
            )
        end = spot.at + len(reference)
    for spot in reversed(ordered):  # from the end, so the offsets before stay true
        reference = reference_text(spot.name)
        text = text[: spot.at] + values[spot.name] + text[spot.at + len(reference) :]
    return text


def _forms(value: str) -> set[str]:
    """The ways ``value`` may appear in a message or an answer: as it is, URL-encoded (as
    yarl and urllib write a path or a query) and JSON-escaped."""
    if not value:
        return set()
    forms = {
        value,
        quote(value, safe=""),
        quote(value),
        quote_plus(value),
        json.dumps(value)[1:-1],
        json.dumps(value, ensure_ascii=False)[1:-1],
    }
    try:
        forms.add(URL.build(path="/" + value).raw_path[1:])
        forms.add(URL("http://h/").with_query({"q": value}).raw_query_string[2:])
    except (ValueError, TypeError):
        pass
    return {f for f in forms if f}
