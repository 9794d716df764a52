"""HTTP: one request, sent by the built-in workers (queue ``http``)."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import TYPE_CHECKING, Annotated, Any

from pydantic import ConfigDict, Field

from composer_core.kinds._kind import SpecChecks, WorkerKind
from composer_core.kinds._values import SpecModel, Template, carries_secret, templated
from composer_core.templates import ORIGIN_KEY, SECRETS_KEY, Json

if TYPE_CHECKING:
    from composer_core.model import Node

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
_HTTP_METHODS = frozenset(HTTP_METHODS)


class HttpSpec(SpecModel):
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


class Http(WorkerKind):
    name = "HTTP"
    spec_model = HttpSpec
    runs_on = "the built-in workers, queue `http`"
    builtin_queue = "http"
    runs_as = "an HTTP request"
    refuses_secrets = None

    def check_spec(self, checks: SpecChecks, path: str, node: Node) -> None:
        spec = node.spec
        url = spec.get("url")
        if url is None:
            checks.add(f"{path}.url", "required for HTTP")
        elif not isinstance(url, str):
            checks.add(f"{path}.url", "must be a string")
        elif not templated(url) and not url.startswith(("http://", "https://")):
            checks.add(f"{path}.url", f"{url!r} is not an http:// or https:// URL")
        method = spec.get("method")
        if (
            isinstance(method, str)
            and not templated(method)
            and method.upper() not in _HTTP_METHODS
        ):
            checks.add(
                f"{path}.method", f"{method!r} is not one of {', '.join(sorted(_HTTP_METHODS))}"
            )
        elif method is not None and not isinstance(method, str):
            checks.add(f"{path}.method", "must be a string")
        for key in ("headers", "query"):
            value = spec.get(key)
            if value is not None and not isinstance(value, Mapping) and not templated(value):
                checks.add(f"{path}.{key}", "must be a mapping of names to values")
        if spec.get("accept_status") is not None:
            for where, message in accept_status_problems(spec["accept_status"]):
                checks.add(f"{path}.accept_status{where}", message)
        if (
            not checks.stored
            and isinstance(url, str)
            and carries_secret(spec)
            and not fixes_origin(url)
        ):
            checks.add(f"{path}.url", UNFIXED_ORIGIN)

    def finish_input(self, node: Node, value: Json) -> None:
        """A rendered input that carries secrets names the only origin they may go to,
        read from the definition's text: nothing a run renders into the url moves it."""
        if isinstance(value, dict) and SECRETS_KEY in value:
            value[ORIGIN_KEY] = literal_origin(node.spec.get("url"))


HTTP = Http()


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
