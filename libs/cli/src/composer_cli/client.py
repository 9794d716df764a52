"""The CLI's only way to the engine: the REST API over HTTP.

Every failure becomes a ``CliError`` with one line a person can act on: the
gateway is down (and where it was looked for), the token is missing or
unknown, the role is too weak, or the API's problem detail (with each
definition problem on its own line).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

import httpx

from composer_cli.render import printable, printable_value

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
    _http: httpx.Client | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        self.url = self.url.rstrip("/")

    @property
    def http(self) -> httpx.Client:
        if self._http is None:
            headers = {"User-Agent": "composer-cli"}
            if self.token:
                headers["Authorization"] = f"Bearer {self.token}"
            self._http = httpx.Client(base_url=self.url, headers=headers, timeout=self.timeout)
        return self._http

    def close(self) -> None:
        if self._http is not None:
            self._http.close()

    def call(
        self,
        method: str,
        path: str,
        *,
        json: Any = None,
        content: bytes | None = None,
        content_type: str | None = None,
        params: dict[str, Any] | None = None,
        timeout: float | None = None,
        ok: tuple[int, ...] = (200, 201),
        headers: dict[str, str] | None = None,
    ) -> Answer:
        """Send one request; return the answer when its status is in ``ok``, else raise CliError."""
        sent = dict(headers or {})
        if content_type:
            sent["Content-Type"] = content_type
        kwargs: dict[str, Any] = {"params": params, "headers": sent or None}
        if timeout is not None:
            kwargs["timeout"] = timeout
        if content is not None:
            kwargs["content"] = content
        elif json is not None:
            kwargs["json"] = json
        try:
            response = self.http.request(method, path, **kwargs)
        except httpx.ConnectError as exc:
            raise CliError(
                f"cannot reach the Composer API at {self.url} ({_reason(exc)}): is the api-gateway "
                "running? Start the stack with `make run`, or point COMPOSER_API_URL at it",
                transient=True,
            ) from exc
        except httpx.TimeoutException as exc:
            raise CliError(
                f"the Composer API at {self.url} did not answer in time ({exc})", transient=True
            ) from exc
        except httpx.HTTPError as exc:
            raise CliError(
                f"talking to the Composer API at {self.url} failed: {exc}", transient=True
            ) from exc
        body = _body(response)
        if response.status_code in ok:
            return Answer(response.status_code, body)
        raise self._problem(response.status_code, body)

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


def _reason(exc: httpx.ConnectError) -> str:
    text = str(exc)
    if "refused" in text.lower():
        return "connection refused"
    return text or type(exc).__name__


def _body(response: httpx.Response) -> Any:
    if response.headers.get("content-type", "").split(";")[0].strip().endswith("json"):
        try:
            return response.json()
        except ValueError:
            return response.text
    return response.text
