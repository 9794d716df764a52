"""What every Composer service shares: ids, the stream and hint contracts, settings,
logging, telemetry, the admin port and the entry-point boilerplate."""

from composer_common import admin, hints, ids, logs, service, settings, streams, telemetry

__all__ = ["admin", "hints", "ids", "logs", "service", "settings", "streams", "telemetry"]
