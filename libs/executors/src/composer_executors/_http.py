"""The HTTP node: one request (and its redirects) under the node's timeout.

Redirects are followed here rather than by aiohttp so that every hop is
checked by the same guard as the first request (scheme, IP literal; names
are checked by the session's resolver), and so that what a node sent to one
origin does not reach another: a redirect to another origin keeps only the
headers on :data:`CROSS_ORIGIN_HEADERS` (an ``X-Api-Key`` meant for one API
must not be handed to whatever host it redirects to), and a redirect from
https to http is refused (it would send the request, and the answer, in clear
text). A redirect target that is not an http(s) URL with a host fails that
call like any other bad answer.

A node that carries secrets goes only where its definition says. Its input
names, under ``$origin``, the ``scheme://host[:port]`` its definition's url
spells out before any template; the request's url, secrets resolved, must
have exactly that origin and no ``user:password@``, or the node fails before
anything is sent. That is what keeps a run's input from pointing a secret at
another server (``http://api.example.com{{ input.path }}`` with the path
``@attacker.example/``), also for a definition stored before validation
refused such a url. A redirect to another origin is followed only when
nothing that goes along (the body, a header kept, the target's own URL)
holds a secret's value.

The final answer completes the node when its status is in the spec's
``accept_status`` (2xx when it sets none), so a workflow can route on a 404 or
a 503 with a SWITCH; any other status fails the attempt with
:class:`HttpStatusError`, retryable or not by the status (``_errors``).

Every request may carry an ``Idempotency-Key`` (the caller's key, stable
across the attempts of one node in one run) unless the node's headers set
their own, so a server can tell a retried attempt from a new request.
"""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import Mapping
from typing import Any

import aiohttp
from multidict import CIMultiDict
from yarl import URL

from composer_executors._errors import (
    ExecutionError,
    ExecutionTimeout,
    HttpStatusError,
    InvalidSpec,
    TargetRefused,
)
from composer_executors._guard import AddressGuard, GuardedConnector, HttpPolicy
from composer_executors._secret_references import (
    ORIGIN_KEY,
    SECRETS_KEY,
    Resolved,
    run_with_secrets,
)
from composer_executors._secret_sources import SecretSource
from composer_rpc.codes import ErrorCode

_METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"})
_REDIRECTS = frozenset({301, 302, 303, 307, 308})
_STATUS_CLASS = re.compile(r"[1-5][xX][xX]")
#: The only request headers that follow a redirect to another origin: they describe
#: the request, none of them authenticates it. Everything else (Authorization,
#: Cookie, X-Api-Key, any custom header) may be a secret meant for the first origin.
CROSS_ORIGIN_HEADERS = frozenset(
    {
        "accept",
        "accept-encoding",
        "accept-language",
        "cache-control",
        "content-language",
        "content-type",
        "idempotency-key",
        "user-agent",
    }
)
IDEMPOTENCY_HEADER = "Idempotency-Key"
_EXCERPT_CHARS = 500
_CHUNK = 64 * 1024


async def run_http(
    spec: Mapping[str, Any],
    *,
    timeout: float,
    session: aiohttp.ClientSession,
    policy: HttpPolicy,
    idempotency_key: str | None = None,
    secrets: SecretSource | None = None,
) -> dict[str, Any]:
    """Send the request ``spec`` describes and return ``{status, headers, body}``.

    ``spec`` is the node's resolved input: ``method`` (default GET), ``url``,
    ``headers``, ``query``, ``body`` (a dict or list is sent as JSON, a
    string as text) and ``accept_status`` (the statuses that complete the
    node, numbers and classes like ``"5xx"``; default 2xx: any other final
    status raises :class:`HttpStatusError`). The body of the answer is decoded
    JSON when the response says it is JSON, else text; header names are
    lower-cased and repeated headers joined with ", ". ``session`` must come from
    :func:`create_http_session` with the same policy: its connector is the
    SSRF guard. ``idempotency_key`` is sent as the ``Idempotency-Key`` header
    unless the spec's headers hold one (in any case): pass a key that is the
    same for every attempt of the node, so a retry can be recognised.
    The secret references the spec lists under ``$secrets`` are resolved from
    ``secrets`` just before the request, and their values kept out of the
    output and the errors (docs/secrets.md); such a request goes only to the
    origin the spec's ``$origin`` names, and follows a redirect elsewhere only
    when it would take no value there.
    Raises :class:`ExecutionError` for every failure.
    """
    connector = session.connector
    if not isinstance(connector, GuardedConnector):
        raise TypeError(
            "run_http needs a session from composer_executors.create_http_session(policy): "
            "a plain aiohttp.ClientSession has no SSRF guard"
        )
    if connector.guard != AddressGuard.of(policy):
        raise ValueError(
            f"the session's SSRF guard ({connector.guard}) differs from the policy's "
            f"({AddressGuard.of(policy)}): create the session from the same policy"
        )
    if timeout <= 0:
        raise ValueError(f"timeout must be positive, got {timeout}")

    held: list[Resolved] = []

    async def call(resolved: Mapping[str, Any]) -> dict[str, Any]:
        carried = held[0] if held and held[0].names else None
        return await _call(resolved, timeout, session, policy, idempotency_key, carried, spec)

    return await run_with_secrets(spec, secrets, call, on_resolved=held.append)


async def _call(
    spec: Mapping[str, Any],
    timeout: float,
    session: aiohttp.ClientSession,
    policy: HttpPolicy,
    idempotency_key: str | None,
    carried: Resolved | None,
    stored: Mapping[str, Any],
) -> dict[str, Any]:
    """``carried``: the secrets resolved into ``spec`` (None: none); ``stored``: the
    input as the engine wrote it, whose ``$origin`` says where they may go."""
    request = _Request.from_spec(spec)
    if carried is not None:
        _check_destination(request.url, stored)
        request.carried = carried
    if idempotency_key and IDEMPOTENCY_HEADER not in request.headers:
        request.headers[IDEMPOTENCY_HEADER] = idempotency_key
    try:
        async with asyncio.timeout(timeout):
            return await _send(request, session, policy)
    except TimeoutError:
        raise ExecutionTimeout(
            f"{request.method} {_show(request.url)} did not answer within {timeout:g} s; "
            "raise the node's timeout_seconds if the service is slow"
        ) from None
    except aiohttp.ClientConnectorCertificateError as exc:
        raise ExecutionError(
            f"{request.method} {_show(request.url)}: TLS certificate rejected: {exc.certificate_error}",
            code=ErrorCode.TLS_ERROR,
        ) from exc
    except aiohttp.ClientSSLError as exc:
        raise ExecutionError(
            f"{request.method} {_show(request.url)}: TLS failed: {exc}", code=ErrorCode.TLS_ERROR
        ) from exc
    except aiohttp.InvalidURL as exc:
        raise InvalidSpec(f"url {_show(request.url)} is not a valid URL: {exc}") from exc
    except aiohttp.ClientError as exc:
        raise ExecutionError(
            f"{request.method} {_show(request.url)} failed: {type(exc).__name__}: {exc}",
            code=ErrorCode.CONNECTION_ERROR,
        ) from exc


class _Request:
    """The validated request; mutated hop by hop as redirects are followed."""

    def __init__(
        self,
        method: str,
        url: URL,
        headers: CIMultiDict[str],
        body: bytes | None,
        accept: _Accept | None = None,
    ):
        self.method = method
        self.url = url
        self.headers = headers
        self.body = body
        self.accept = accept or _Accept.DEFAULT
        #: The secrets in this request (None: none): no redirect may take one elsewhere.
        self.carried: Resolved | None = None

    @classmethod
    def from_spec(cls, spec: Mapping[str, Any]) -> _Request:
        if not isinstance(spec, Mapping):
            raise InvalidSpec(f"an HTTP spec must be an object, got {type(spec).__name__}")
        method = spec.get("method") or "GET"
        if not isinstance(method, str) or method.upper() not in _METHODS:
            raise InvalidSpec(f"method {method!r} is not one of {', '.join(sorted(_METHODS))}")
        raw_url = spec.get("url")
        if not isinstance(raw_url, str) or not raw_url:
            raise InvalidSpec(f"url must be a non-empty string, got {raw_url!r}")
        try:
            url = URL(raw_url)
        except (ValueError, TypeError) as exc:
            raise InvalidSpec(f"url {raw_url!r} is not a valid URL: {exc}") from exc
        url = url.extend_query(_query(spec.get("query")))
        headers = _headers(spec.get("headers"))
        body = _body(spec.get("body"), headers)
        accept = _Accept.from_spec(spec.get("accept_status"))
        return cls(method.upper(), url, headers, body, accept)


class _Accept:
    """The statuses that complete the node: ``accept_status``, or 2xx when it is absent."""

    DEFAULT: _Accept

    def __init__(self, statuses: frozenset[int], classes: frozenset[int], shown: str | None):
        self.statuses = statuses
        self.classes = classes  # hundreds: 2 for "2xx"
        self.shown = shown  # the spec's list for messages; None: the default

    @classmethod
    def from_spec(cls, raw: Any) -> _Accept:
        if raw is None:
            return cls.DEFAULT
        if not isinstance(raw, list) or not raw:
            raise InvalidSpec(
                f'accept_status must be a non-empty list of statuses (404) or classes ("2xx"), '
                f"got {raw!r}"
            )
        statuses: set[int] = set()
        classes: set[int] = set()
        for item in raw:
            if isinstance(item, int) and not isinstance(item, bool) and 100 <= item <= 599:
                statuses.add(item)
            elif isinstance(item, str) and _STATUS_CLASS.fullmatch(item):
                classes.add(int(item[0]))
            else:
                raise InvalidSpec(
                    f"accept_status: {item!r} is not a status: use a number from 100 to 599 "
                    '(404) or a class "1xx" to "5xx"'
                )
        return cls(frozenset(statuses), frozenset(classes), json.dumps(raw))

    def __contains__(self, status: int) -> bool:
        return status in self.statuses or status // 100 in self.classes


_Accept.DEFAULT = _Accept(frozenset(), frozenset({2}), None)


def _headers(raw: Any) -> CIMultiDict[str]:
    if raw is None:
        return CIMultiDict()
    if not isinstance(raw, Mapping):
        raise InvalidSpec(f"headers must be an object of name to value, got {type(raw).__name__}")
    headers: CIMultiDict[str] = CIMultiDict()
    for name, value in raw.items():
        if not isinstance(name, str) or not name:
            raise InvalidSpec(f"header name {name!r} must be a non-empty string")
        if value is None:
            continue
        if isinstance(value, bool):
            value = "true" if value else "false"
        if not isinstance(value, str | int | float):
            raise InvalidSpec(f"header {name!r} must be a string or a number, got {value!r}")
        text = str(value)
        if "\r" in text or "\n" in text:
            raise InvalidSpec(f"header {name!r} contains a line break")
        headers.add(name, text)
    return headers


def _query(raw: Any) -> list[tuple[str, str]]:
    if raw is None:
        return []
    if not isinstance(raw, Mapping):
        raise InvalidSpec(f"query must be an object of name to value, got {type(raw).__name__}")
    pairs: list[tuple[str, str]] = []
    for name, value in raw.items():
        values = value if isinstance(value, list) else [value]
        for item in values:
            if item is None:
                continue
            if isinstance(item, bool):
                item = "true" if item else "false"
            if not isinstance(item, str | int | float):
                raise InvalidSpec(
                    f"query parameter {name!r} must be a string, number or list of them, got {item!r}"
                )
            pairs.append((str(name), str(item)))
    return pairs


def _body(raw: Any, headers: CIMultiDict[str]) -> bytes | None:
    if raw is None:
        return None
    if isinstance(raw, str):
        headers.setdefault("Content-Type", "text/plain; charset=utf-8")
        return raw.encode()
    try:
        data = json.dumps(raw, ensure_ascii=False, allow_nan=False).encode()
    except (TypeError, ValueError) as exc:
        raise InvalidSpec(f"body cannot be sent as JSON: {exc}") from exc
    headers.setdefault("Content-Type", "application/json")
    return data


async def _send(
    request: _Request, session: aiohttp.ClientSession, policy: HttpPolicy
) -> dict[str, Any]:
    for _hop in range(policy.max_redirects + 1):
        _check_url(request.url, policy)
        async with session.request(
            request.method,
            request.url,
            headers=request.headers,
            data=request.body,
            allow_redirects=False,
        ) as response:
            location = response.headers.get("Location")
            if response.status in _REDIRECTS and location:
                _follow(request, response.status, location, policy)
                continue
            # A HEAD answer declares the size of a body it does not send.
            raw = (
                b""
                if request.method == "HEAD"
                else await _read_capped(response, request, policy.max_response_bytes)
            )
            body = _decode(response, raw)
            if response.status not in request.accept:
                excerpt = _excerpt(body)
                unlisted = (
                    f" (not in accept_status {request.accept.shown})"
                    if request.accept.shown is not None
                    else ""
                )
                raise HttpStatusError(
                    f"{request.method} {_show(request.url)} answered {response.status} "
                    f"{response.reason or ''}".rstrip()
                    + unlisted
                    + (f": {excerpt}" if excerpt else ""),
                    status=response.status,
                    excerpt=excerpt,
                )
            return {"status": response.status, "headers": _header_dict(response), "body": body}
    raise ExecutionError(
        f"{_show(request.url)}: more than {policy.max_redirects} redirects; "
        "call the final URL directly",
        code=ErrorCode.TOO_MANY_REDIRECTS,
        permanent=True,
    )


def _check_url(url: URL, policy: HttpPolicy) -> None:
    if url.scheme not in policy.allowed_schemes:
        raise InvalidSpec(
            f"url {_show(url)}: scheme {url.scheme!r} is not allowed "
            f"(use {' or '.join(sorted(policy.allowed_schemes))})"
        )
    if not url.host:
        raise InvalidSpec(f"url {_show(url)} has no host")
    AddressGuard.of(policy).check_host(url.host, url.port)


def _follow(request: _Request, status: int, location: str, policy: HttpPolicy) -> None:
    """Point ``request`` at the redirect target, as browsers and curl do, or fail the call.

    The target must be an http(s) URL with a host, must not step down from
    https to http, and takes to another origin only the headers on
    :data:`CROSS_ORIGIN_HEADERS`.
    """
    source = request.url
    try:
        target = source.join(URL(location))
        origin = target.origin() if target.host else None
    except (ValueError, TypeError) as exc:
        raise _bad_redirect(source, location, f"it is not a valid URL ({exc})") from exc
    if target.scheme not in policy.allowed_schemes:
        allowed = " or ".join(sorted(policy.allowed_schemes))
        raise _bad_redirect(source, location, f"an HTTP node follows only {allowed} URLs")
    if origin is None:
        raise _bad_redirect(source, location, "the target has no host")
    if source.scheme == "https" and target.scheme == "http":
        raise TargetRefused(
            f"{_show(source)} redirected to {_show(target)}: refused to follow a redirect "
            "from https to http, which would send the request and its answer unencrypted; "
            "call the final URL directly if plain http is really intended"
        )
    if status == 303 or (status in (301, 302) and request.method == "POST"):
        if request.method != "HEAD":
            request.method = "GET"
        request.body = None
        request.headers.popall("Content-Type", None)
    if origin != source.origin():
        for name in list(request.headers.keys()):
            if name.lower() not in CROSS_ORIGIN_HEADERS:
                request.headers.popall(name, None)
        if request.carried is not None:
            _check_nothing_carried(request, request.carried, source, target)
    request.url = target


def _check_destination(url: URL, stored: Mapping[str, Any]) -> None:
    """Refuse a request carrying secrets to any origin but the one ``$origin`` names."""
    if ORIGIN_KEY not in stored:
        raise InvalidSpec(
            f"the input lists secret references under {SECRETS_KEY} but no {ORIGIN_KEY}, "
            "the origin they may be sent to: it was rendered before Composer recorded it, or "
            "changed since; nothing was sent. Run the node again (composer retry RUN --from "
            "NODE) to have its input rendered anew"
        )
    allowed = stored[ORIGIN_KEY]
    if allowed is None:
        raise InvalidSpec(
            f"this node carries secret references, but its definition's url does not spell out "
            f"where it goes: {_show(url)} was rendered from a template in its scheme or host, "
            "which a run's input could point anywhere; nothing was sent. Write the url as "
            "https://host[:port]/… with templates only after the host (docs/secrets.md)"
        )
    try:
        wanted = _origin_of(URL(allowed)) if isinstance(allowed, str) else None
    except (ValueError, TypeError):
        wanted = None
    if wanted is None or not wanted[1]:
        raise InvalidSpec(
            f"the input's {ORIGIN_KEY} {allowed!r} is not an origin; Composer writes it when "
            "it renders a node's secret references, and it must not be changed"
        )
    if _origin_of(url) != wanted:
        raise InvalidSpec(
            f"url {_show(url)} goes to {_shown_origin(url)}, but this node carries secret "
            f"references and its definition sends them only to {allowed}: refused, nothing "
            "was sent (a run's input rendered into the url must not move its host or port)"
        )
    if url.user is not None or url.password is not None:
        raise InvalidSpec(
            f"url {_show(url)} carries a user:password@ part, and this node carries secret "
            "references: refused, nothing was sent. Send credentials in a header "
            "(Authorization: 'Basic {{ secret.NAME }}')"
        )


def _origin_of(url: URL) -> tuple[str, str, int | None]:
    """What makes an origin, normalised as the request will use it (case, IDNA, port)."""
    return (url.scheme.lower(), (url.raw_host or "").lower(), url.port)


def _shown_origin(url: URL) -> str:
    try:
        return str(url.origin())
    except ValueError:
        return repr(url.host)


def _check_nothing_carried(request: _Request, carried: Resolved, source: URL, target: URL) -> None:
    """Refuse a redirect to another origin that would take a secret's value there: in the
    body it sends again (307, 308), a header it keeps, or the target URL itself."""
    places = []
    if request.body is not None and carried.holds(request.body.decode(errors="replace")):
        places.append("its body")
    if any(carried.holds(f"{name}: {value}") for name, value in request.headers.items()):
        places.append("a header it keeps")
    if carried.holds(str(target)) or carried.holds(target.raw_path_qs):
        places.append("the target's URL")
    if places:
        raise TargetRefused(
            f"{_show(source)} redirected to another origin, {_show(target)}, and following "
            f"would take a secret's value there in {' and '.join(places)}: refused. Call the "
            "final URL directly if it is meant to get the secret"
        )


def _bad_redirect(source: URL, location: str, why: str) -> TargetRefused:
    shown = location if len(location) <= 200 else location[:200] + "…"
    return TargetRefused(
        f"{_show(source)} redirected to {shown!r}, which cannot be followed: {why}; "
        "call a URL that answers without such a redirect"
    )


async def _read_capped(response: aiohttp.ClientResponse, request: _Request, cap: int) -> bytes:
    declared = response.content_length
    if declared is not None and declared > cap:
        raise _too_large(request, f"its Content-Length is {declared} bytes", cap)
    data = bytearray()
    async for chunk in response.content.iter_chunked(_CHUNK):
        data += chunk
        if len(data) > cap:
            raise _too_large(request, "it is larger", cap)
    return bytes(data)


def _too_large(request: _Request, detail: str, cap: int) -> ExecutionError:
    return ExecutionError(
        f"{request.method} {_show(request.url)}: the response exceeds the {cap}-byte limit ({detail})",
        code=ErrorCode.RESPONSE_TOO_LARGE,
        permanent=True,
    )


def _decode(response: aiohttp.ClientResponse, raw: bytes) -> Any:
    charset = response.charset or "utf-8"
    try:
        text = raw.decode(charset, errors="replace")
    except LookupError:
        text = raw.decode("utf-8", errors="replace")
    mimetype = response.content_type
    if mimetype == "application/json" or mimetype.endswith("+json"):
        if not text.strip():
            return None
        try:
            return json.loads(text)
        except ValueError:
            return text  # says JSON but is not: the text is still worth having
    return text


def _header_dict(response: aiohttp.ClientResponse) -> dict[str, str]:
    headers: dict[str, str] = {}
    for name, value in response.headers.items():
        key = name.lower()
        headers[key] = f"{headers[key]}, {value}" if key in headers else value
    return headers


def _excerpt(body: Any) -> str:
    text = body if isinstance(body, str) else json.dumps(body, ensure_ascii=False)
    text = " ".join(text.split())
    return text if len(text) <= _EXCERPT_CHARS else text[:_EXCERPT_CHARS] + "…"


def _show(url: URL) -> str:
    """The URL for messages: without credentials or query, which may hold secrets."""
    if not url.is_absolute():
        return str(url)
    shown = url.with_user(None).with_query(None).with_fragment(None)
    return str(shown) + ("?…" if url.query_string else "")
