"""The workers' secret sources, built once at start from the settings and the environment.

The directory (COMPOSER_SECRETS_DIR) is asked first, so a rotated file wins
over a variable set when the workers started; then the ``COMPOSER_SECRET_<NAME>``
variables, taken here once. docs/secrets.md.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from composer_executors import DirectorySecrets, EnvironmentSecrets, SecretChain, SecretSource
from composer_service import StartupError

#: The variables that hold secrets: COMPOSER_SECRET_API_TOKEN is {{ secret.API_TOKEN }}.
PREFIX = "COMPOSER_SECRET_"


def secret_variables(environ: Mapping[str, str]) -> dict[str, str]:
    """The ``COMPOSER_SECRET_*`` variables of ``environ``, copied once at start."""
    return {k: v for k, v in environ.items() if k.startswith(PREFIX)}


def secret_source(secrets_dir: str | None, environ: Mapping[str, str]) -> SecretSource:
    """The chain the built-in executors resolve ``{{ secret.NAME }}`` from.

    Raises StartupError for a COMPOSER_SECRETS_DIR that is not a directory or a
    COMPOSER_SECRET_ variable whose rest is not a secret name, naming it.
    """
    sources: list[SecretSource] = []
    if secrets_dir:
        directory = Path(secrets_dir)
        if not directory.is_dir():
            raise StartupError(
                f"COMPOSER_SECRETS_DIR={secrets_dir} is not a directory: mount the secrets "
                "there (one file per secret, named as the secret) or unset it"
            )
        sources.append(DirectorySecrets(directory))
    try:
        sources.append(EnvironmentSecrets.from_environ(environ, prefix=PREFIX))
    except ValueError as exc:
        raise StartupError(f"{exc}; rename or unset the variable") from None
    return SecretChain(sources)
