"""Light helpers every Composer package shares, the public SDK included: ids, the
stream and hint contracts, the log context, the OpenTelemetry API handles.

Nothing here pulls in a server: the process runtime (settings, the admin port,
the OpenTelemetry SDK and exporters, logging set-up) is composer_service.
"""

from composer_common import hints, ids, logs, streams, telemetry

__all__ = ["hints", "ids", "logs", "streams", "telemetry"]
