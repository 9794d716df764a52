"""Bearer tokens with roles: admin ⊇ operator ⊇ viewer.

admin manages definitions; operator starts, signals, cancels and retries
runs; viewer reads. Tokens come from ``COMPOSER_API_TOKENS="token:role,…"``
and are compared in constant time against every configured token (so the
time an answer takes does not tell how much of a token matched, nor which
token was close). The gateway's entry point refuses to start with a
well-known, placeholder or short token unless COMPOSER_DEV_MODE is true
(``composer_service.tokens``): an admin token can run code on the workers
through a PYTHON node.
"""

from __future__ import annotations

import hmac
from dataclasses import dataclass
from enum import IntEnum

from composer_api_gateway.problems import ApiProblem


class Role(IntEnum):
    """Ordered: a role may do everything a lower one may."""

    VIEWER = 1
    OPERATOR = 2
    ADMIN = 3

    @property
    def label(self) -> str:
        return self.name.lower()


@dataclass(frozen=True, slots=True)
class Token:
    secret: bytes
    role: Role


def parse_tokens(text: str) -> list[Token]:
    """Parse ``token:role,…``; raise ValueError naming the bad entry and the fix."""
    tokens: list[Token] = []
    for raw in text.split(","):
        entry = raw.strip()
        if not entry:
            continue
        secret, sep, role = entry.rpartition(":")
        if not sep or not secret:
            raise ValueError(
                f"COMPOSER_API_TOKENS entry {_redact(entry)!r} is not token:role "
                "(roles: admin, operator, viewer)"
            )
        try:
            parsed = Role[role.strip().upper()]
        except KeyError:
            raise ValueError(
                f"COMPOSER_API_TOKENS entry {_redact(entry)!r} has unknown role {role!r}; "
                "use admin, operator or viewer"
            ) from None
        tokens.append(Token(secret.strip().encode(), parsed))
    return tokens


def _redact(entry: str) -> str:
    secret, _, role = entry.rpartition(":")
    shown = secret[:2] + "…" if secret else entry[:2] + "…"
    return f"{shown}:{role}" if secret else shown


class Authenticator:
    def __init__(self, tokens: list[Token]) -> None:
        self._tokens = tokens

    @property
    def configured(self) -> bool:
        return bool(self._tokens)

    def role_of(self, authorization: str | None) -> Role:
        """The role of the request's bearer token; raise a 401 problem when there is none."""
        if not self._tokens:
            raise ApiProblem(
                401,
                "unauthorized",
                "this api-gateway has no API tokens configured: set COMPOSER_API_TOKENS "
                "(token:role,…) where it runs",
            )
        if not authorization:
            raise ApiProblem(
                401, "unauthorized", "missing Authorization: Bearer <token> (COMPOSER_API_TOKEN)"
            )
        scheme, _, value = authorization.partition(" ")
        if scheme.lower() != "bearer" or not value.strip():
            raise ApiProblem(
                401, "unauthorized", "the Authorization header must be 'Bearer <token>'"
            )
        presented = value.strip().encode("utf-8", "surrogateescape")
        found: Role | None = None
        for token in self._tokens:  # every token, always: no early exit on a match
            if hmac.compare_digest(token.secret, presented):
                found = token.role
        if found is None:
            raise ApiProblem(401, "unauthorized", "unknown API token")
        return found

    @staticmethod
    def require(role: Role, needed: Role, action: str) -> None:
        if role < needed:
            raise ApiProblem(
                403,
                "forbidden",
                f"{action} needs the {needed.label} role; this token is {role.label}",
            )
