"""Where the built-in workers find the values of ``{{ secret.NAME }}`` (docs/secrets.md).

A :class:`SecretSource` answers one question: the value of a name, or None
when it does not hold it. Two come with Composer, and a Vault-like store is
one more class with the same two methods:

- :class:`DirectorySecrets`: one file per name in a directory, as a
  Kubernetes Secret volume or Docker secrets mount them
  (COMPOSER_SECRETS_DIR). Read at each use, so a rotated secret is used as
  soon as the file changes.
- :class:`EnvironmentSecrets`: ``COMPOSER_SECRET_<NAME>`` variables, taken
  by the workers' entry point once at start and passed in (nothing here
  reads the environment).

:class:`SecretChain` asks several in turn; the workers ask the directory
first, then the environment.
"""

from __future__ import annotations

import asyncio
import errno
import re
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Protocol

from composer_executors._errors import SecretUnavailable

#: What a secret's name must look like (the definition's validation says the same).
SECRET_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
#: The prefix of the variables EnvironmentSecrets.from_environ takes.
ENV_PREFIX = "COMPOSER_SECRET_"


class SecretSource(Protocol):
    """Where secret values come from. Implement both methods for another store."""

    async def get(self, name: str) -> str | None:
        """The value of secret ``name``, or None when this source does not hold it.

        ``name`` always matches ``[A-Za-z_][A-Za-z0-9_]*``. Raise
        :class:`SecretUnavailable` when the source cannot answer now (retryable).
        """
        ...

    def where(self, name: str) -> str:
        """Where an operator sets ``name`` in this source: the missing secret's error says it."""
        ...


class EnvironmentSecrets:
    """Secrets given as values, read once at start (``COMPOSER_SECRET_<NAME>`` variables)."""

    def __init__(self, values: Mapping[str, str], *, prefix: str = ENV_PREFIX) -> None:
        self._values = dict(values)
        self._prefix = prefix

    @classmethod
    def from_environ(
        cls, environ: Mapping[str, str], *, prefix: str = ENV_PREFIX
    ) -> EnvironmentSecrets:
        """The secrets in ``environ`` (the entry point passes ``os.environ``), by name:
        ``COMPOSER_SECRET_API_TOKEN`` is ``{{ secret.API_TOKEN }}``, case and all.

        Raises ValueError naming a variable whose rest is not a secret name.
        """
        values: dict[str, str] = {}
        for key, value in environ.items():
            if not key.startswith(prefix):
                continue
            name = key[len(prefix) :]
            if not SECRET_NAME.fullmatch(name):
                raise ValueError(
                    f"{key}: {name!r} is not a secret name: use letters, digits and '_', "
                    "not starting with a digit"
                )
            values[name] = value
        return cls(values, prefix=prefix)

    @property
    def names(self) -> frozenset[str]:
        """The names it holds (for a start-up log line; never the values)."""
        return frozenset(self._values)

    async def get(self, name: str) -> str | None:
        return self._values.get(name)

    def where(self, name: str) -> str:
        return f"the variable {self._prefix}{name} in the workers' environment (read at start)"

    def __repr__(self) -> str:
        return f"EnvironmentSecrets({sorted(self._values)})"


class DirectorySecrets:
    """One file per secret, named as the secret, in ``directory``; read at each use.

    A trailing line break is dropped (``echo value > NAME`` writes one); the
    rest of the file is the value, as UTF-8.
    """

    def __init__(self, directory: str | Path) -> None:
        self._directory = Path(directory)

    @property
    def directory(self) -> Path:
        return self._directory

    async def get(self, name: str) -> str | None:
        if not SECRET_NAME.fullmatch(name):  # never a path of another shape
            return None
        path = self._directory / name
        try:
            text = await asyncio.to_thread(path.read_text, encoding="utf-8")
        except FileNotFoundError:
            return None
        except UnicodeDecodeError:
            # Not chained: the decode error holds the file's bytes.
            raise SecretUnavailable(
                f"secret {name!r}: {path} is not UTF-8 text", permanent=True
            ) from None
        except OSError as exc:
            raise SecretUnavailable(
                f"secret {name!r}: cannot read {path}: {exc.strerror or exc}",
                permanent=exc.errno in (errno.EACCES, errno.EISDIR),
            ) from exc
        return text.removesuffix("\n").removesuffix("\r")

    def where(self, name: str) -> str:
        return f"a file {self._directory / name} (COMPOSER_SECRETS_DIR, read at each use)"

    def __repr__(self) -> str:
        return f"DirectorySecrets({str(self._directory)!r})"


class SecretChain:
    """Several sources asked in order; the first that holds a name answers."""

    def __init__(self, sources: Iterable[SecretSource]) -> None:
        self._sources = tuple(sources)

    async def get(self, name: str) -> str | None:
        for source in self._sources:
            value = await source.get(name)
            if value is not None:
                return value
        return None

    def where(self, name: str) -> str:
        if not self._sources:
            return EnvironmentSecrets({}).where(name)
        return " or ".join(source.where(name) for source in self._sources)

    def __repr__(self) -> str:
        return f"SecretChain({list(self._sources)!r})"
