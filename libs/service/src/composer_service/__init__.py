"""Composer's process runtime: what turns a loop into a service.

A service's ``__main__`` reads its settings (a ``ServiceSettings`` subclass)
once, and runs ``serving(settings.runtime(name, …))`` around its loop; ``run``
is its ``main()``. The server kit (aiohttp for the admin port,
pydantic-settings, the OpenTelemetry SDK and exporters, prometheus-client)
lives here and only here, so the worker SDK does not depend on it.
"""

from composer_common.process import forbid_dumping
from composer_service.admin import Check, serve_admin
from composer_service.engines import EngineConfig, build_engine
from composer_service.entry import run
from composer_service.errors import EXIT_PORT_IN_USE, PortInUse, StartupError, listen_error
from composer_service.runtime import Runtime, RuntimeConfig, serving
from composer_service.settings import ServerSettings, ServiceSettings
from composer_service.signals import sleep_or_stop, stop_on_signals

__all__ = [
    "EXIT_PORT_IN_USE",
    "Check",
    "EngineConfig",
    "PortInUse",
    "Runtime",
    "RuntimeConfig",
    "ServerSettings",
    "ServiceSettings",
    "StartupError",
    "build_engine",
    "forbid_dumping",
    "listen_error",
    "run",
    "serve_admin",
    "serving",
    "sleep_or_stop",
    "stop_on_signals",
]
