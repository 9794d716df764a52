"""Composer api-gateway: the REST API (docs/architecture.md §9) on aiohttp.

``create_app(GatewayConfig(...), engine=…, redis=…)`` builds the application; the console
script ``composer-api-gateway`` serves it with settings from ``COMPOSER_*``.
"""

from composer_api_gateway.app import create_app
from composer_api_gateway.openapi import build_spec
from composer_api_gateway.routes import ROUTES, Route
from composer_api_gateway.state import GatewayConfig

__all__ = ["ROUTES", "GatewayConfig", "Route", "build_spec", "create_app"]
