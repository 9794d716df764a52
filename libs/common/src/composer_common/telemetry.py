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


def recording() -> bool:
    """Whether this process installed a tracer provider. Without one no span is kept,
    and a span that has no trace context to carry on is only cost."""
    return not isinstance(trace.get_tracer_provider(), trace.ProxyTracerProvider)


def meter() -> metrics.Meter:
    return metrics.get_meter("composer")


def inject(carrier: MutableMapping[str, str]) -> MutableMapping[str, str]:
    """Write the current trace context into ``carrier`` (a message's fields, gRPC metadata)."""
    propagate.inject(carrier)
    return carrier


def extract(carrier: Mapping[str, str]) -> context.Context:
    """The trace context a carrier brought (an empty one if none)."""
    return propagate.extract(dict(carrier))
