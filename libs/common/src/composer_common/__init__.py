"""What every Composer service shares: ids, the stream and hint contracts, settings, logging."""

from composer_common import hints, ids, logs, settings, streams

__all__ = ["hints", "ids", "logs", "settings", "streams"]
