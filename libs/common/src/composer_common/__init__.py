"""What every Composer service shares: ids, settings, logging, telemetry, the admin
port and the entry-point boilerplate. (Streams and hints live in composer_queue.)"""

from composer_common import admin, ids, logs, service, settings, telemetry

__all__ = ["admin", "ids", "logs", "service", "settings", "telemetry"]
