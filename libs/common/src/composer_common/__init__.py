"""Light helpers every Composer package shares, the public SDK included: ids, the
log context, the OpenTelemetry API handles.

Nothing here pulls in a server: the process runtime (settings, the admin port,
the OpenTelemetry SDK and exporters, logging set-up) is composer_service, and
streams and hints are composer_queue.
"""

from composer_common import ids, logs, telemetry

__all__ = ["ids", "logs", "telemetry"]
