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

from collections.abc import Mapping, MutableMapping

from opentelemetry import context, metrics, propagate, trace


def tracer() -> trace.Tracer:
    return trace.get_tracer("composer")


def meter() -> metrics.Meter:
    return metrics.get_meter("composer")


def inject(carrier: MutableMapping[str, str]) -> MutableMapping[str, str]:
    """Write the current trace context into ``carrier`` (a message's fields, gRPC metadata)."""
    propagate.inject(carrier)
    return carrier


def extract(carrier: Mapping[str, str]) -> context.Context:
    """The trace context a carrier brought (an empty one if none)."""
    return propagate.extract(dict(carrier))
