"""Whether a process records spans, and what a dispatch carries of its trace: each in a
fresh interpreter, since a tracer provider, once set, stays for the process."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest


def _run(code: str, **env: str) -> str:
    environ = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        env={**environ, **env},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def test_no_provider_records_nothing_until_one_is_set_in_code() -> None:
    out = _run(
        """
        from opentelemetry import trace
        from opentelemetry.sdk.trace import TracerProvider
        from composer_common.telemetry import recording, traceparent, tracer

        before = recording(), recording()
        with tracer().start_as_current_span("no provider"):
            outside = traceparent()
        trace.set_tracer_provider(TracerProvider())
        with tracer().start_as_current_span("decision"):
            inside = traceparent()
        print(before, outside, recording(), inside.split("-")[0], len(inside), traceparent())
        """
    )
    assert out == "(False, False) None True 00 55 None"


def test_a_provider_named_by_the_environment_is_seen() -> None:
    out = _run(
        """
        from composer_common.telemetry import recording
        print(recording())
        """,
        OTEL_PYTHON_TRACER_PROVIDER="sdk_tracer_provider",
    )
    assert out == "True"


@pytest.mark.parametrize("provider", ["", "set"])
def test_a_traceparent_continues_the_callers_trace(provider: str) -> None:
    """A dispatch made under a caller's trace (the API request's traceparent) carries
    that trace on, with or without a provider of this process's own."""
    out = _run(
        f"""
        from opentelemetry import trace
        from opentelemetry.sdk.trace import TracerProvider
        from composer_common.telemetry import extract, traceparent, tracer

        if {provider!r}:
            trace.set_tracer_provider(TracerProvider())
        caller = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
        with tracer().start_as_current_span("request", context=extract({{"traceparent": caller}})):
            print(traceparent().split("-")[1])
        """
    )
    assert out == "0af7651916cd43dd8448eb211c80319c"
