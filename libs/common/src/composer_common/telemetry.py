"""OpenTelemetry for every service: traces, metrics, and the context that links them.

Call ``setup_telemetry`` once at a service's entry point. Metrics are always
readable as Prometheus text (the admin port's /metrics) and are also pushed
over OTLP when COMPOSER_OTLP_ENDPOINT is set, as are spans. Without setup
(tests, libraries used alone) the API's no-op providers apply.

Trace context crosses process boundaries as a W3C ``traceparent``: in the
outbox payload and stream message of a dispatch, and in gRPC metadata, so a
worker's handler span is a child of the API request that started the run.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping, MutableMapping

from opentelemetry import context, metrics, propagate, trace
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import MetricReader, PeriodicExportingMetricReader
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SimpleSpanProcessor, SpanExporter

log = logging.getLogger(__name__)
_configured = False


def setup_telemetry(
    service: str,
    *,
    otlp_endpoint: str | None = None,
    span_exporters: Iterable[SpanExporter] = (),
    prometheus: bool = True,
) -> None:
    """Install the global tracer and meter providers for this process (once)."""
    global _configured
    if _configured:
        return
    resource = Resource.create({"service.name": f"composer-{service}"})
    readers: list[MetricReader] = []
    if prometheus:
        from opentelemetry.exporter.prometheus import PrometheusMetricReader

        readers.append(PrometheusMetricReader())
    tracer_provider = TracerProvider(resource=resource)
    for exporter in span_exporters:
        tracer_provider.add_span_processor(SimpleSpanProcessor(exporter))
    if otlp_endpoint:
        from opentelemetry.exporter.otlp.proto.grpc.metric_exporter import OTLPMetricExporter
        from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter

        readers.append(
            PeriodicExportingMetricReader(OTLPMetricExporter(endpoint=otlp_endpoint, insecure=True))
        )
        tracer_provider.add_span_processor(
            BatchSpanProcessor(OTLPSpanExporter(endpoint=otlp_endpoint, insecure=True))
        )
        log.info("exporting traces and metrics over OTLP to %s", otlp_endpoint)
    metrics.set_meter_provider(MeterProvider(resource=resource, metric_readers=readers))
    trace.set_tracer_provider(tracer_provider)
    _configured = True


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
