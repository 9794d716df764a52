"""Trace and metric handles for libraries, on the OpenTelemetry API only.

Libraries (the engine, the SDK, the loops) record spans and instruments
through these; a process that wants them exported installs the SDK's
providers once at its entry point (``composer_service.telemetry``, done by
``serving()``). Without that, the API's no-op providers apply, so a user's
worker or a test pays nothing and needs no SDK installed.

Trace context crosses process boundaries as a W3C ``traceparent``: in the
outbox payload and stream message of a dispatch, and in gRPC metadata, so a
worker's handler span is a child of the API request that started the run.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping, MutableMapping

from opentelemetry import context, metrics, propagate, trace


@functools.cache
def tracer() -> trace.Tracer:
    """One handle for the process: made before a provider is installed, it is the API's
    proxy, which follows the provider once one is (``get_tracer`` made a new proxy at
    every call)."""
    return trace.get_tracer("composer")


#: Set once a tracer provider is found installed: the API sets one at most once.
_installed = False
#: Whether the public call was made once: it reads the environment's provider then.
_asked = False


def recording() -> bool:
    """Whether this process installed a tracer provider. Without one no span is kept,
    and a span that has no trace context to carry on is only cost.

    Asked for every task and every request, so the common answer, "none", is made
    cheap: ``get_tracer_provider()`` looks ``OTEL_PYTHON_TRACER_PROVIDER`` up in
    ``os.environ`` each time no provider is set (a failed look-up raises inside
    ``os.environ``: 6 % of a no-op worker's CPU). The first call asks the API, which
    installs a provider that variable names; after it, nothing set in code (the API's
    module global, read defensively: without it the public call decides) is none.
    A provider set later in code is seen at once."""
    global _installed, _asked
    if _installed:
        return True
    if _asked and getattr(trace, "_TRACER_PROVIDER", ...) is None:
        return False
    _asked = True
    _installed = not isinstance(trace.get_tracer_provider(), trace.ProxyTracerProvider)
    return _installed


def meter() -> metrics.Meter:
    return metrics.get_meter("composer")


def inject(carrier: MutableMapping[str, str]) -> MutableMapping[str, str]:
    """Write the current trace context into ``carrier`` (a message's fields, gRPC metadata)."""
    propagate.inject(carrier)
    return carrier


def traceparent() -> str | None:
    """The current span's context as a W3C ``traceparent`` (None: no valid span, so
    no trace to carry on). What a dispatch's stream message carries: written for
    each task, so the propagators are not run when there is nothing to write."""
    if not trace.get_current_span().get_span_context().is_valid:
        return None
    return inject({}).get("traceparent")


def extract(carrier: Mapping[str, str]) -> context.Context:
    """The trace context a carrier brought (an empty one if none)."""
    return propagate.extract(dict(carrier))
