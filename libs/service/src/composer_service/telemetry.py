"""The OpenTelemetry SDK for a service process: where its spans and metrics go.

Installed once per process by ``serving()``. Metrics are always readable as
Prometheus text (the admin port's /metrics) and are also pushed over OTLP
when COMPOSER_OTLP_ENDPOINT is set, as are spans. Libraries record through
the API handles in ``composer_common.telemetry`` and never import this.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable

from opentelemetry import metrics, trace
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
    """Install the global tracer and meter providers for this process (the first call wins:
    OpenTelemetry's global providers can be set only once)."""
    global _configured
    if _configured:
        return
    resource = Resource.create({"service.name": f"composer-{service}"})
    readers: list[MetricReader] = []
    if prometheus:
        from opentelemetry.exporter.prometheus import PrometheusMetricReader

        readers.append(PrometheusMetricReader())
    tracer_provider = TracerProvider(resource=resource)
    exporters = list(span_exporters)
    for exporter in exporters:
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
    if exporters or otlp_endpoint:
        trace.set_tracer_provider(tracer_provider)
    # else: spans nobody exports are not recorded — the API's no-op tracer still
    # carries an incoming trace context along, at a fraction of the cost per span.
    _configured = True
