"""Settings every service reads from ``COMPOSER_*`` environment variables (DESIGN.md §7).

Read once, at a service's entry point, and passed down as plain values:
libraries never read the environment themselves.
"""

from __future__ import annotations

from typing import Literal

from pydantic_settings import BaseSettings, SettingsConfigDict


class CommonSettings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="COMPOSER_", extra="ignore")

    database_url: str = "postgresql://postgres@127.0.0.1:5432/composer"
    redis_url: str = "redis://127.0.0.1:6379/0"
    redis_prefix: str = "composer"
    log_level: str = "INFO"
    #: json, human, or auto (JSON unless stderr is a terminal).
    log_format: Literal["auto", "json", "human"] = "auto"
    #: The service's admin port (/healthz, /readyz, /metrics); unset: none.
    admin_port: int | None = None
    #: Where the admin port listens: containers set 0.0.0.0 so probes and Prometheus reach it.
    admin_host: str = "127.0.0.1"
    #: Where to push traces and metrics over OTLP/gRPC (e.g. http://otel-collector:4317); unset: nowhere.
    otlp_endpoint: str | None = None

    @property
    def json_logs(self) -> bool | None:
        return None if self.log_format == "auto" else self.log_format == "json"
