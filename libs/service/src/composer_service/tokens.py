"""Which tokens a service accepts as secrets: one rule for the API tokens (api-gateway)
and the worker tokens (coordinator).

A token that is printed in this repository (the old development defaults, the
Kubernetes Secret's ``CHANGE-ME`` placeholders) or short enough to guess is no
secret: whoever holds an admin API token can run code on the workers through a
PYTHON node. So outside development mode (``COMPOSER_DEV_MODE``) a service refuses
to start with one, naming the variable and how to make a good one; in development
mode it starts and warns. The rule reads no environment: the services pass their
settings in.
"""

from __future__ import annotations

from collections.abc import Iterable

from composer_service.entry import StartupError

#: The shortest token accepted: ``secrets.token_urlsafe(32)`` gives 43 characters.
MIN_TOKEN_LENGTH = 32
#: The development defaults Composer used to ship.
WELL_KNOWN_TOKENS = frozenset({"dev-token", "dev-worker-token", "dev-builtin-worker-token"})
#: What deploy/k8s/secret.yaml's placeholders start with (in any case).
PLACEHOLDER = "CHANGE-ME"
GENERATE_HINT = "python -c 'import secrets; print(secrets.token_urlsafe(32))'"


class WeakTokenError(StartupError):
    """A configured token is well-known, a placeholder or short; the message names each
    one's variable and the fix (``composer_service.run`` exits 2 with it)."""


def token_weakness(token: str) -> str | None:
    """Why ``token`` is no secret (a phrase that never quotes a real secret), or None."""
    if not token:
        return "is empty"
    if token in WELL_KNOWN_TOKENS:
        return f"is the well-known development token {token!r}"
    if token.upper().startswith(PLACEHOLDER):
        return f"is a {PLACEHOLDER} placeholder"
    if len(token) < MIN_TOKEN_LENGTH:
        return f"has {len(token)} characters (at least {MIN_TOKEN_LENGTH} needed)"
    return None


def check_tokens(tokens: Iterable[tuple[str, str]], *, dev_mode: bool) -> list[str]:
    """Apply the rule to ``(where, token)`` pairs, ``where`` naming the variable (and the
    entry, for a list); every weak one is named at once.

    Outside development mode raise WeakTokenError; in it, return one warning per weak
    token for the caller to log.
    """
    weak = [(where, why) for where, token in tokens if (why := token_weakness(token))]
    if not weak:
        return []
    if dev_mode:
        return [
            f"{where} {why}: accepted because COMPOSER_DEV_MODE is true; "
            f"never use it outside a development machine"
            for where, why in weak
        ]
    found = "; ".join(f"{where} {why}" for where, why in weak)
    raise WeakTokenError(
        f"{found}. A token must be a random secret of at least {MIN_TOKEN_LENGTH} "
        f"characters: generate one with: {GENERATE_HINT} "
        "(on a development machine only, COMPOSER_DEV_MODE=true accepts weak tokens)"
    )
