"""Readable logs for every service: one line per event, with the service name."""

from __future__ import annotations

import logging
import sys


def setup_logging(service: str, level: str = "INFO") -> None:
    """Configure the root logger once, at a service's entry point."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(
        logging.Formatter(
            f"%(asctime)s %(levelname)-5s {service} %(name)s: %(message)s", "%H:%M:%S"
        )
    )
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
