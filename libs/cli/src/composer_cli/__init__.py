"""The ``composer`` command line (docs/architecture.md §9).

It talks to the api-gateway over HTTP only (COMPOSER_API_URL,
COMPOSER_API_TOKEN); ``composer migrate`` alone goes to PostgreSQL, through
composer_repo's migration runner.
"""

from composer_cli.client import ApiClient, CliError
from composer_cli.main import main

__all__ = ["ApiClient", "CliError", "main"]
