"""The gateway's REST API, as a client outside the containers sees it (its published port)."""

from __future__ import annotations

import json
import time
from typing import Any

import httpx


class Api:
    def __init__(self, url: str, token: str) -> None:
        self.http = httpx.Client(
            base_url=url, headers={"Authorization": f"Bearer {token}"}, timeout=60
        )

    def close(self) -> None:
        self.http.close()

    def apply(self, definition: dict[str, Any]) -> None:
        """Create the definition's next version and deploy it."""
        answer = self.http.post(
            "/v1/workflows",
            content=json.dumps(definition),
            headers={"Content-Type": "application/json"},
            params={"deploy": "true"},
        )
        assert answer.status_code == 201, f"POST /v1/workflows: {answer.status_code} {answer.text}"

    def start(self, workflow: str, data: dict[str, Any]) -> str:
        answer = self.http.post("/v1/runs", json={"workflow_id": workflow, "input": data})
        assert answer.status_code in (200, 201), (
            f"POST /v1/runs: {answer.status_code} {answer.text}"
        )
        run_id: str = answer.json()["run_id"]
        return run_id

    def run(self, run_id: str) -> dict[str, Any]:
        answer = self.http.get(f"/v1/runs/{run_id}")
        assert answer.status_code == 200, (
            f"GET /v1/runs/{run_id}: {answer.status_code} {answer.text}"
        )
        body: dict[str, Any] = answer.json()
        return body

    def result(self, run_id: str, timeout: float = 120) -> dict[str, Any]:
        """The run once it has ended (long-polled), failing after ``timeout`` seconds."""
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            answer = self.http.get(
                f"/v1/runs/{run_id}/result", params={"timeout": max(1.0, min(left, 30.0))}
            )
            body: dict[str, Any] = answer.json()
            if answer.status_code == 200:
                return body
            assert answer.status_code == 202, f"GET …/result: {answer.status_code} {answer.text}"
            if left <= 0:
                raise AssertionError(f"run {run_id} did not end within {timeout:g} s: {body}")
