"""The CLI's only way to the engine: the REST API over HTTP.

Every failure becomes a ``CliError`` with one line a person can act on: the
gateway is down (and where it was looked for), the token is missing or
unknown, the role is too weak, or the API's problem detail (with each
definition problem on its own line).

It speaks HTTP with the standard library (http.client), one kept-alive connection
per command: importing an HTTP library would cost more than most commands take.
"""

from __future__ import annotations

import json as jsonlib
import socket
from dataclasses import dataclass, field
from functools import cached_property
from typing import TYPE_CHECKING, Any
from urllib.parse import urlencode, urlsplit

from composer_cli.render import printable, printable_value

if TYPE_CHECKING:
    import http.client

DEFAULT_URL = "http://127.0.0.1:8080"
#: Answers that say the API is there but cannot serve now (a proxy before a restarting
#: gateway, an overloaded one): worth asking again.
_UNAVAILABLE = frozenset({502, 503, 504})


class CliError(Exception):
    """A failure to report as ``error: <message>`` (plus ``details`` lines) and exit 1.

    ``transient``: the API could not be reached or did not answer (down, restarting,
    overloaded), so the same request may succeed later; a refusal is never transient.
    The message and details are printable (``render.printable``): they quote the API.
    """

    def __init__(
        self, message: str, details: list[str] | None = None, *, transient: bool = False
    ) -> None:
        message = printable(message)
        super().__init__(message)
        self.message = message
        self.details = [printable(line) for line in details or []]
        self.transient = transient


@dataclass
class Answer:
    status: int
    #: The JSON as the API sent it: for ``--json`` (through ``render.json_text``).
    body: Any

    @cached_property
    def shown(self) -> Any:
        """The body with every control character out of its strings: for a person."""
        return printable_value(self.body)


@dataclass
class ApiClient:
    url: str = DEFAULT_URL
    token: str = ""
    timeout: float = 30.0
    _connection: http.client.HTTPConnection | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        self.url = self.url.rstrip("/")

    def _connect(self, timeout: float) -> http.client.HTTPConnection:
        import http.client  # email and ssl come with it: only a command that calls pays

        parts = urlsplit(self.url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise CliError(
                f"COMPOSER_API_URL={self.url!r} is no http:// or https:// URL of the API"
            )
        if parts.scheme == "https":
            return http.client.HTTPSConnection(parts.hostname, parts.port, timeout=timeout)
        return http.client.HTTPConnection(parts.hostname, parts.port, timeout=timeout)

    def close(self) -> None:
        if self._connection is not None:
            self._connection.close()
            self._connection = None

    def call(
        self,
        method: str,
        path: str,
        *,
        json: Any = None,
        content: bytes | None = None,
        content_type: str | None = None,
        params: dict[str, Any] | None = None,  # a list value: the parameter repeated
        timeout: float | None = None,
        ok: tuple[int, ...] = (200, 201),
        headers: dict[str, str] | None = None,
    ) -> Answer:
        """Send one request; return the answer when its status is in ``ok``, else raise CliError."""
        import http.client

        sent = {"User-Agent": "composer-cli", "Accept": "application/json"}
        if self.token:
            sent["Authorization"] = f"Bearer {self.token}"
        sent.update(headers or {})
        body: bytes | None = None
        if content is not None:
            body = content
        elif json is not None:
            body = jsonlib.dumps(json).encode()
            content_type = content_type or "application/json"
        if content_type:
            sent["Content-Type"] = content_type
        query = [
            (k, _param(one))
            for k, v in (params or {}).items()
            if v is not None
            for one in (v if isinstance(v, list) else [v])
        ]
        target = urlsplit(self.url).path + path + (f"?{urlencode(query)}" if query else "")
        wait = self.timeout if timeout is None else timeout
        try:
            status, content_type_got, raw = self._send(method, target, body, sent, wait)
        except (ConnectionRefusedError, socket.gaierror) as exc:
            raise CliError(
                f"cannot reach the Composer API at {self.url} ({_reason(exc)}): is the api-gateway "
                "running? Start the stack with `make run`, or point COMPOSER_API_URL at it",
                transient=True,
            ) from exc
        except TimeoutError as exc:
            raise CliError(
                f"the Composer API at {self.url} did not answer in time ({wait:g}s)",
                transient=True,
            ) from exc
        except (OSError, http.client.HTTPException) as exc:
            raise CliError(
                f"talking to the Composer API at {self.url} failed: {exc or type(exc).__name__}",
                transient=True,
            ) from exc
        answer = _body(content_type_got, raw)
        if status in ok:
            return Answer(status, answer)
        raise self._problem(status, answer)

    def _send(
        self, method: str, target: str, body: bytes | None, headers: dict[str, str], wait: float
    ) -> tuple[int, str, bytes]:
        """One exchange on the kept-alive connection; once more on a new one when the
        server had closed the old one (between two commands of a follow, say)."""
        import http.client

        for fresh in (self._connection is None, True):
            if self._connection is None:
                self._connection = self._connect(wait)
            connection = self._connection
            connection.timeout = wait
            if connection.sock is not None:
                connection.sock.settimeout(wait)
            try:
                connection.request(method, target, body=body, headers=headers)
                response = connection.getresponse()
                raw = response.read()
            except (http.client.RemoteDisconnected, BrokenPipeError, ConnectionResetError):
                self.close()
                if fresh:
                    raise
                continue
            except BaseException:
                self.close()
                raise
            if response.will_close:
                self.close()
            return response.status, response.getheader("content-type") or "", raw
        raise AssertionError("unreachable")  # pragma: no cover

    def _problem(self, status: int, body: Any) -> CliError:
        detail = body.get("detail") if isinstance(body, dict) else None
        detail = detail or (body if isinstance(body, str) and body else f"HTTP {status}")
        if status == 401:
            if not self.token:
                return CliError(
                    "the API needs a token: set COMPOSER_API_TOKEN (one of the gateway's "
                    "COMPOSER_API_TOKENS; `make run` prints its own and keeps it in "
                    ".state/tokens.env)"
                )
            return CliError(
                f"the API refused the token in COMPOSER_API_TOKEN ({detail}); use one listed in "
                "the gateway's COMPOSER_API_TOKENS"
            )
        if status == 403:
            return CliError(f"not allowed: {detail}")
        details: list[str] = []
        if isinstance(body, dict):
            for p in body.get("problems") or []:
                details.append(f"{p.get('path') or '(definition)'}: {p.get('message')}")
            for e in body.get("errors") or []:
                details.append(f"{e.get('path')}: {e.get('message')}")
        if status == 422 and details:
            return CliError(f"the definition is invalid ({len(details)} problem(s)):", details)
        return CliError(
            f"{detail} (HTTP {status})",
            details if status != 422 else [],
            transient=status in _UNAVAILABLE,
        )


def _param(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def _reason(exc: OSError) -> str:
    if isinstance(exc, ConnectionRefusedError):
        return "connection refused"
    if isinstance(exc, socket.gaierror):
        return f"unknown host: {exc.strerror}"
    return str(exc) or type(exc).__name__


def _body(content_type: str, raw: bytes) -> Any:
    text = raw.decode("utf-8", errors="replace")
    if content_type.split(";")[0].strip().endswith("json"):
        try:
            return jsonlib.loads(text)
        except ValueError:
            return text
    return text
