"""Worker credentials: which token may serve which queues.

``COMPOSER_WORKER_TOKEN`` is a token for every queue (one fleet of trusted
workers); ``COMPOSER_WORKER_TOKENS="token:queue1|queue2,…"`` names tokens that
may serve only their queues (``token:*`` for all), so a team's workers cannot
lease, renew or report another team's tasks; ``COMPOSER_BUILTIN_WORKER_TOKEN``
is the built-in workers' own, for their queues (``http``, ``python``). A token is compared in constant
time; what it covers is looked up afterwards. Outside COMPOSER_DEV_MODE the coordinator
refuses to start with a well-known, placeholder or guessable token (composer_service.tokens).

Who sets COMPOSER_WORKER_TOKENS means to scope the workers, so a token for every
queue then exists only where that list says ``token:*``: COMPOSER_WORKER_TOKEN beside
it (left over in an environment, a generated file or a Secret) is a start-up error
naming the two ways out, never a silent key to every queue (issue 25).
"""

from __future__ import annotations

import hmac
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from composer_service.tokens import check_tokens

#: The queues the built-in workers serve (services/workers).
BUILT_IN_QUEUES = frozenset({"http", "python"})
#: Queue names as definitions allow them (composer_core.model), or ``*``.
_QUEUE = re.compile(r"[A-Za-z0-9_.\-]+|\*")


class TokenConfigError(ValueError):
    """COMPOSER_WORKER_TOKEN(S) cannot be read: the message names the entry and the fix."""


@dataclass(frozen=True, slots=True)
class WorkerTokens:
    #: token → the queues it covers (None: all).
    scopes: Mapping[str, frozenset[str] | None]
    #: token → where it was configured (the variable, and the entry for a list), for
    #: errors that must name a token without printing it.
    origins: Mapping[str, str] = field(default_factory=dict)

    @classmethod
    def parse(cls, all_queues: str = "", scoped: str = "", builtin: str = "") -> WorkerTokens:
        """From COMPOSER_WORKER_TOKEN (``all_queues``), COMPOSER_WORKER_TOKENS (``scoped``)
        and COMPOSER_BUILTIN_WORKER_TOKEN (``builtin``)."""
        scopes: dict[str, frozenset[str] | None] = {}
        origins: dict[str, str] = {}
        if all_queues.strip() and scoped.strip(" ,"):
            raise TokenConfigError(
                "COMPOSER_WORKER_TOKEN (a token for every queue) is set beside "
                "COMPOSER_WORKER_TOKENS: with scoped tokens, a token for every queue must be "
                "listed among them as <token>:*. Unset COMPOSER_WORKER_TOKEN on the "
                "coordinator, or move it into COMPOSER_WORKER_TOKENS as <token>:* if some "
                "worker must serve every queue"
            )
        if all_queues.strip():
            scopes[all_queues.strip()] = None
            origins[all_queues.strip()] = "COMPOSER_WORKER_TOKEN"
        if builtin.strip():
            if builtin.strip() in scopes:
                raise TokenConfigError(
                    "COMPOSER_BUILTIN_WORKER_TOKEN is COMPOSER_WORKER_TOKEN: give the built-in "
                    "workers a token of their own"
                )
            scopes[builtin.strip()] = BUILT_IN_QUEUES
            origins[builtin.strip()] = "COMPOSER_BUILTIN_WORKER_TOKEN"
        for number, raw in enumerate(scoped.split(","), 1):
            entry = raw.strip()
            if not entry:
                continue
            token, sep, queues = entry.rpartition(":")
            if not sep or not token or not queues:
                raise TokenConfigError(
                    f"COMPOSER_WORKER_TOKENS entry {_masked(entry)!r} is not token:queue1|queue2 "
                    "(or token:* for every queue)"
                )
            names = [q.strip() for q in queues.split("|")]
            bad = [q for q in names if not _QUEUE.fullmatch(q)]
            if bad:
                raise TokenConfigError(
                    f"COMPOSER_WORKER_TOKENS names {', '.join(map(repr, bad))} for token "
                    f"{_masked(token)!r}: a queue name has letters, digits, '_', '-', '.' "
                    "(or is * for every queue)"
                )
            if token in scopes:
                raise TokenConfigError(
                    f"worker token {_masked(token)!r} is configured twice: give each its queues once"
                )
            scopes[token] = None if "*" in names else frozenset(names)
            origins[token] = f"COMPOSER_WORKER_TOKENS entry {number} ({'|'.join(names)})"
        if not scopes:
            raise TokenConfigError(
                "no worker token configured: set COMPOSER_WORKER_TOKEN (every queue) or "
                "COMPOSER_WORKER_TOKENS=token:queue1|queue2,… (workers present one)"
            )
        return cls(scopes, origins)

    def check_strength(self, *, dev_mode: bool) -> list[str]:
        """Refuse well-known, placeholder and guessable tokens (WeakTokenError, naming each
        one's variable) unless ``dev_mode``; then return a warning for each."""
        return check_tokens(
            ((self.origins.get(token, "a worker token"), token) for token in self.scopes),
            dev_mode=dev_mode,
        )

    def match(self, presented: str) -> str | None:
        """The configured token ``presented`` is (compared in constant time), or None."""
        found = None
        for token in self.scopes:
            if hmac.compare_digest(presented.encode(), token.encode()):
                found = token
        return found

    def queues(self, token: str) -> frozenset[str] | None:
        """The queues a matched token covers (None: all)."""
        return self.scopes[token]

    def of_metadata(self, metadata: Sequence[tuple[str, str | bytes]] | None) -> str | None:
        """The configured token an ``authorization: Bearer <token>`` header presents."""
        for key, value in metadata or ():
            if key == "authorization" and isinstance(value, str) and value.startswith("Bearer "):
                return self.match(value.removeprefix("Bearer "))
        return None


def _masked(token: str) -> str:
    """Enough of a token to find it in the configuration, not enough to use it."""
    return token[:3] + "…" if len(token) > 6 else "…"
