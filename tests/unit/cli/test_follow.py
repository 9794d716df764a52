"""``composer watch`` (and ``--wait``) following a run through the real ApiClient, its
HTTP answered by a script (its one exchange, ``_send``, replaced): an outage after the first answer is
waited out with one line about it, and each error is printed once."""

from __future__ import annotations

import importlib
import io
import json
from collections.abc import Iterator
from typing import Any

import pytest
from rich.console import Console

from composer_cli.client import ApiClient, CliError
from composer_cli.main import follow

#: The module (the package's ``main`` is its console-script function).
cli_main = importlib.import_module("composer_cli.main")
RUN_ID = "0190a000-0000-7000-8000-000000000001"
REFUSED = "cannot reach the Composer API at http://api.test (connection refused)"


def run(status: str, error: str | None = None) -> dict[str, Any]:
    return {
        "run_id": RUN_ID,
        "workflow_id": "payment",
        "version": 1,
        "status": status,
        "created_at": "2026-12-01T09:00:00Z",
        "completed_at": None,
        "error": error,
        "tasks": [],
    }


class Scripted(ApiClient):
    """An ApiClient whose exchanges get ``steps`` in turn: a run (200, or 202 while it goes
    on), an HTTP status, or an exception (a refused connection, a timeout) to raise."""

    def __init__(self, steps: Iterator[Any]) -> None:
        super().__init__("http://api.test", "token")
        self.steps = steps
        self.seen: list[str] = []

    def _send(
        self, method: str, target: str, body: bytes | None, headers: dict[str, str], wait: float
    ) -> tuple[int, str, bytes]:
        self.seen.append(target.split("?")[0])
        step = next(self.steps)
        if isinstance(step, BaseException):
            raise step
        if isinstance(step, int):
            return step, "application/json", json.dumps({"detail": f"status {step}"}).encode()
        status = 202 if step["status"] == "RUNNING" else 200
        return status, "application/json", json.dumps(step).encode()


def scripted(*steps: Any) -> tuple[ApiClient, list[str]]:
    client = Scripted(iter(steps))
    return client, client.seen


def refused() -> ConnectionRefusedError:
    return ConnectionRefusedError(111, "Connection refused")


def test_an_outage_mid_watch_is_waited_out_and_said_once(
    capsys: pytest.CaptureFixture[str],
) -> None:
    traceback = "Traceback (most recent call last):\n  ...\nValueError: card declined"
    client, seen = scripted(
        run("RUNNING"),
        refused(),
        refused(),
        503,
        TimeoutError("timed out"),
        run("FAILED", f"node charge failed: {traceback}"),
    )
    ended = follow(client, RUN_ID, retry_delay=0)
    assert ended["status"] == "FAILED"
    assert len(seen) == 6
    out, err = capsys.readouterr()
    assert err.count("asking again for up to 300s") == 1
    assert err.startswith(f"{REFUSED}: is the api-gateway running?")
    assert "status 503" not in err and "did not answer in time" not in err
    assert err.count("the Composer API answers again") == 1
    assert out.count("ValueError: card declined") == 1


def test_no_first_answer_fails_at_once(capsys: pytest.CaptureFixture[str]) -> None:
    client, seen = scripted(refused())
    with pytest.raises(CliError, match="cannot reach the Composer API"):
        follow(client, RUN_ID, retry_delay=0)
    assert len(seen) == 1 and capsys.readouterr().err == ""


def test_a_refusal_mid_watch_is_not_asked_again() -> None:
    client, seen = scripted(run("RUNNING"), 404)
    with pytest.raises(CliError, match=r"status 404 \(HTTP 404\)"):
        follow(client, RUN_ID, retry_delay=0)
    assert len(seen) == 2


def test_an_outage_longer_than_the_limit_gives_up(capsys: pytest.CaptureFixture[str]) -> None:
    client, seen = scripted(run("RUNNING"), refused(), refused())
    with pytest.raises(CliError, match="gave up after 0s"):
        follow(client, RUN_ID, retry_delay=0, outage_seconds=0)
    assert len(seen) == 3
    assert capsys.readouterr().err.count("cannot reach") == 1


def test_a_terminal_s_live_view_gets_no_control_character_from_the_api(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """On a terminal the run is redrawn in place (rich's own escapes); the API's text in it
    (an error setting the title and clearing the screen) is printed without its controls."""
    screen = io.StringIO()
    monkeypatch.setattr(cli_main, "out", Console(file=screen, force_terminal=True, width=200))
    hostile = "\x1b]0;pwned\x07\x1b[2J\x9b31mboom"
    client, _ = scripted(run("RUNNING", hostile), run("FAILED", hostile))
    follow(client, RUN_ID, retry_delay=0)
    shown = screen.getvalue()
    assert "]0;pwned[2J31mboom" in shown
    assert "\x1b]0" not in shown and "\x1b[2J" not in shown and "\x9b" not in shown
    assert "\x07" not in shown
