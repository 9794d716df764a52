"""What each node type takes in its ``spec``: one pydantic model per type.

A node's ``spec`` stays a plain mapping on :class:`Node` (its values may be
``{{ templates }}`` resolved only when the task is created, and validation
reports every problem with its path rather than stopping at the first), so
these models are not what validates a definition. They are the one written
statement of each type's fields: their names are the keys ``_build`` accepts,
and their types, defaults and descriptions feed docs/nodes.md and the
OpenAPI document, so neither can drift from the other.
"""

from __future__ import annotations

import re
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field

from composer_core.model._limits import MAX_SECONDS
from composer_core.model._states import NodeType

#: A ``{{ expression }}`` standing for the whole value: it must resolve to the field's type.
Template = Annotated[
    str,
    Field(
        pattern=r"\{\{",
        title="template",
        description="a {{ expression }} that resolves to the field's type",
    ),
]
Seconds = Annotated[float, Field(ge=0, le=MAX_SECONDS)]
#: A status class in ``accept_status``: ``"2xx"`` is 200 to 299.
STATUS_CLASS = re.compile(r"[1-5][xX][xX]")
Status = Annotated[int, Field(ge=100, le=599)]
StatusClass = Annotated[str, Field(pattern=r"^[1-5][xX][xX]$", title="status class")]
#: What an HTTP node accepts when its spec sets no ``accept_status``.
DEFAULT_ACCEPT_STATUS = ("2xx",)
HTTP_METHODS = ("GET", "POST", "PUT", "PATCH", "DELETE", "HEAD", "OPTIONS")
#: The start of an HTTP url that says where the request goes: ``scheme://host[:port]``.
#: No ``user:password@`` (its ``@`` ends the match), no template (``{`` ends it too).
_ORIGIN = re.compile(r"(?i:https?)://(?:\[[0-9A-Fa-f:.]+\]|[\w.-]+)(?::[0-9]{1,5})?")
#: Why a url does not fix where a node that carries a secret sends it.
UNFIXED_ORIGIN = (
    "an HTTP node that carries a secret reference must name where it sends it: start url "
    "with a literal http(s)://host[:port] followed by '/', '?', '#' or nothing, with no "
    "template before that and no user:password@ "
    "(https://api.example.com/v1/{{ input.path }}; credentials go in a header). A template "
    "in the scheme, host or port would let a run's input send the secret to another server"
)


class _SpecModel(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class HttpSpec(_SpecModel):
    """One HTTP request, sent by the built-in workers (queue ``http``).

    The node's output is ``{status, headers, body}``: ``headers`` with lower-case
    names (repeated headers joined with ", "), ``body`` decoded JSON when the
    response says it is JSON, else text (at most COMPOSER_HTTP_MAX_RESPONSE_BYTES).
    Redirects (301, 302, 303, 307, 308) are followed, up to 5, each hop checked
    again by the SSRF guard; a redirect to another origin keeps only headers that
    carry no credentials, and one from https to http is refused. A spec that
    carries a secret reference is sent only to the origin its url spells out, and
    not across a redirect that would take a secret's value along (docs/secrets.md).
    """

    model_config = ConfigDict(
        json_schema_extra={
            "examples": [
                {
                    "method": "POST",
                    "url": "https://api.example.com/orders/{{input.order_id}}/charge",
                    "headers": {"Authorization": "Bearer {{ secret.PAYMENTS_TOKEN }}"},
                    "body": {"amount": "{{input.amount}}"},
                    "accept_status": ["2xx", 409],
                }
            ]
        }
    )

    url: str = Field(
        description="http:// or https:// URL. The SSRF guard refuses loopback, private, "
        "link-local and other non-public addresses unless COMPOSER_HTTP_ALLOW_PRIVATE "
        "or COMPOSER_HTTP_ALLOW_NETWORKS lets them through. When any field of the spec "
        "holds a {{ secret.NAME }}, the scheme, host and port are written literally, "
        "templates only after them (https://api.example.com/{{input.path}})."
    )
    method: str = Field(
        default="GET",
        description=f"one of {', '.join(HTTP_METHODS)}, in any case",
    )
    headers: dict[str, str | int | float | bool | None] | Template | None = Field(
        default=None,
        description="request headers, name to value; a null value sends no header. An "
        "Idempotency-Key header (the same for every attempt of the node in one run) is "
        "added unless you set one.",
    )
    query: dict[str, Any] | Template | None = Field(
        default=None,
        description="query parameters, name to a value or a list of values (each one "
        "repeated); appended to those already in url; null values are left out",
    )
    body: Any = Field(
        default=None,
        description="a string is sent as text (Content-Type text/plain; charset=utf-8), any "
        "other JSON value as JSON (application/json); a Content-Type header you set wins",
    )
    accept_status: list[Status | StatusClass | Template] | Template | None = Field(
        default=None,
        description="the statuses that complete the node: numbers (404) and classes "
        '("2xx", "5xx"); absent: ["2xx"]. The list replaces the default, so '
        'write ["2xx", 404] to add 404 to it. Any other status fails the attempt '
        "(docs/nodes.md, HTTP statuses).",
    )


class PythonSpec(_SpecModel):
    """Python code, run by the built-in workers (queue ``python``) in a child process.

    The node's output is what ``main(input)`` returns (JSON). ``code`` is never
    templated: pass values (and secret references) through ``input``.
    """

    model_config = ConfigDict(
        json_schema_extra={
            "examples": [
                {
                    "code": "def main(input):\n    return {'total': input['price'] * 0.9}\n",
                    "input": {"price": "{{input.price}}"},
                }
            ]
        }
    )

    code: str = Field(
        description="a module that defines a top-level function main(input), sync or async"
    )
    input: Any = Field(
        default_factory=dict,
        description="the value passed to main; templates in it are resolved when the task "
        "is created",
    )


class TaskSpec(BaseModel):
    """Work for your own workers: the node's ``queue`` names the queue they read
    (any but ``http`` and ``python``, the built-in workers' own).

    The spec is free-form: it is the task's input, handed to your handler as it is
    (templates resolved). The node's output is what the handler returns.
    """

    model_config = ConfigDict(
        extra="allow",
        frozen=True,
        json_schema_extra={"examples": [{"order_id": "{{input.order_id}}", "express": True}]},
    )


class WaitSpec(_SpecModel):
    """Parks the run until a time; the timer service wakes it.

    Exactly one of ``duration_seconds`` or ``until``. The node's output is
    ``{woke_at}`` (RFC 3339, UTC).
    """

    model_config = ConfigDict(json_schema_extra={"examples": [{"duration_seconds": 3600}]})

    duration_seconds: Seconds | Template | None = Field(
        default=None, description="how long to wait from when the node is reached"
    )
    until: str | None = Field(
        default=None,
        description="an RFC 3339 time with a time zone (2026-12-01T09:00:00Z); a time in "
        "the past wakes at once",
    )


class WaitForEventSpec(_SpecModel):
    """Parks the run until a signal of that name is sent to it (POST
    /v1/runs/{run_id}/signals/{name}); one sent earlier and not yet taken is taken at
    once. The node's output is the signal's payload.
    """

    model_config = ConfigDict(
        json_schema_extra={"examples": [{"event": "payment_received", "timeout_seconds": 86400}]}
    )

    event: str = Field(description="the signal name to wait for")
    timeout_seconds: Seconds | Template | None = Field(
        default=None,
        description="fail the node with `timed out waiting for event …` after this long; "
        "absent or 0: wait for ever",
    )


class SwitchSpec(_SpecModel):
    """Chooses branches: each edge out of it may carry a ``condition``; every edge whose
    condition is true is taken (an edge without one always is), the others' nodes are
    skipped. Takes no spec; its output is its predecessor's output."""


class ForkSpec(_SpecModel):
    """Starts branches that run in parallel: every edge out of it is taken. Takes no
    spec; its output is ``{}``."""


class JoinSpec(_SpecModel):
    """Waits for every incoming edge to resolve (a branch that was skipped counts as
    resolved) and goes on if any was taken. Takes no spec; its output is ``{}``."""


#: The spec model of each node type.
NODE_SPECS: dict[NodeType, type[BaseModel]] = {
    NodeType.HTTP: HttpSpec,
    NodeType.PYTHON: PythonSpec,
    NodeType.TASK: TaskSpec,
    NodeType.SWITCH: SwitchSpec,
    NodeType.FORK: ForkSpec,
    NodeType.JOIN: JoinSpec,
    NodeType.WAIT: WaitSpec,
    NodeType.WAIT_FOR_EVENT: WaitForEventSpec,
}


def accept_status_problems(value: Any) -> list[tuple[str, str]]:
    """``(sub-path, message)`` for each thing wrong with an ``accept_status`` value.

    Templated values pass: they are checked by the worker once resolved.
    """
    if isinstance(value, str) and "{{" in value:
        return []
    if not isinstance(value, list):
        return [("", f'must be a list of statuses (404) or classes ("2xx"), got {value!r}')]
    if not value:
        return [("", 'is empty: no status could complete the node; leave it out for ["2xx"]')]
    problems: list[tuple[str, str]] = []
    for i, item in enumerate(value):
        if isinstance(item, str) and "{{" in item:
            continue
        if isinstance(item, int) and not isinstance(item, bool) and 100 <= item <= 599:
            continue
        if isinstance(item, str) and STATUS_CLASS.fullmatch(item):
            continue
        problems.append(
            (
                f"[{i}]",
                f"{item!r} is not a status: use a number from 100 to 599 (404) or a "
                'class "1xx" to "5xx"',
            )
        )
    return problems


def literal_origin(url: Any) -> str | None:
    """The ``scheme://host[:port]`` that ``url`` spells out before its first template;
    None when its literal start names no host.

    This is where the built-in workers may send a node's secrets (the engine writes it
    into the input beside ``$secrets``): it comes from the definition's text, so no
    value rendered into the url can move it. For a url whose authority runs on into a
    template (``http://api.example.com{{ input.path }}``, stored before validation
    refused that) it is the part before the template: the worker then refuses any
    rendering that lands elsewhere.
    """
    if not isinstance(url, str):
        return None
    match = _ORIGIN.match(url.split("{{", 1)[0])
    return match.group(0) if match else None


def fixes_origin(url: Any) -> bool:
    """Whether ``url`` is a string whose literal text ends its ``scheme://host[:port]``
    before any template: followed by ``/``, ``?``, ``#`` or nothing."""
    if not isinstance(url, str):
        return False
    match = _ORIGIN.match(url)
    return match is not None and (match.end() == len(url) or url[match.end()] in "/?#")
