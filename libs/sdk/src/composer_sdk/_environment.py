"""Where a worker connects unless its program says: the environment ``make run`` leaves.

The SDK runs in a user's program, not in a service of ours, so no ServiceSettings
reads its environment: WorkerConfig's connection fields default to the variables
that ``.state/stack.env`` and ``.state/tokens.env`` set (issue 31), so the README's
worker reaches the stack that wrote them, whatever its COMPOSER_PORT_BASE. This is
the one module of the SDK that reads the environment.
"""

from __future__ import annotations

import os
from collections.abc import Callable

#: Where a worker connects when neither its config nor the environment says.
DEFAULT_REDIS_URL = "redis://127.0.0.1:6379/0"
DEFAULT_COORDINATOR = "127.0.0.1:50051"
DEFAULT_REDIS_PREFIX = "composer"


def from_env(name: str, default: str) -> Callable[[], str]:
    """A dataclass default factory: ``name``'s value when the config is made, else ``default``."""
    return lambda: os.environ.get(name) or default


def flag_from_env(name: str, default: bool = False) -> Callable[[], bool]:
    """A dataclass default factory for a yes/no variable: true for 1, true, yes or on (any
    case), false for 0, false, no or off, ``default`` when unset or empty; ValueError
    naming it otherwise."""

    def read() -> bool:
        value = (os.environ.get(name) or "").strip().lower()
        if not value:
            return default
        if value in ("1", "true", "yes", "on"):
            return True
        if value in ("0", "false", "no", "off"):
            return False
        raise ValueError(f"{name}={value!r} is neither true nor false (say true or false)")

    return read


def optional_from_env(name: str) -> Callable[[], str | None]:
    """Likewise, None when ``name`` is unset or empty."""
    return lambda: os.environ.get(name) or None
