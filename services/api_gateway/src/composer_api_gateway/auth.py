"""Bearer tokens with names and roles: admin ⊇ operator ⊇ viewer.

admin manages definitions; operator starts, signals, cancels and retries
runs; viewer reads. Tokens come from ``COMPOSER_API_TOKENS="name=token:role,…"``
and are compared in constant time against every configured token (so the
time an answer takes does not tell how much of a token matched, nor which
token was close). The gateway's entry point refuses to start with a
well-known, placeholder or guessable token unless COMPOSER_DEV_MODE is true
(``composer_service.tokens``): an admin token can run code on the workers
through a PYTHON node.

A token's name is who the audit records say did something: who created a
definition, started, signalled, cancelled or retried a run, and the caller a
run's handlers see (``ctx.caller``). The older form ``token:role`` is still
read; such a token is named ``<role>-<the first 8 hex digits of its SHA-256>``
(``admin-3f2a91c0``): the same name wherever the entry is in the list and
whatever else the list holds, and nothing a reader of the name can use.
"""

from __future__ import annotations

import hashlib
import hmac
import re
from dataclasses import dataclass
from enum import IntEnum

from composer_api_gateway.problems import ApiProblem

#: A token's name: what audit fields and ``ctx.caller`` show.
NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.@-]{0,63}")
_NAME_RULE = "letters, digits, '_', '.', '@' or '-', starting with a letter or digit, at most 64"
_ROLES = "roles: admin, operator, viewer"


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
    name: str
    secret: bytes
    role: Role
    #: The entry had no name (``token:role``): ``name`` was derived from the token.
    derived_name: bool = False


@dataclass(frozen=True, slots=True)
class Caller:
    """Who sent a request: the name and role of the token it presented."""

    name: str
    role: Role


def default_name(secret: str, role: Role) -> str:
    """The name of an entry written ``token:role``: stable (it depends on the token
    alone, not on its place in the list) and revealing nothing of the token."""
    return f"{role.label}-{hashlib.sha256(secret.encode()).hexdigest()[:8]}"


def parse_tokens(text: str) -> list[Token]:
    """Parse ``name=token:role,…`` (or ``token:role`` entries); raise ValueError naming
    the bad entry (never its token) and the fix.

    An entry is named when the text before its first ``=`` is not empty and the text
    after it (the token) does not start with ``=``: so a base64 token padded with
    ``=`` still reads as an unnamed token, while one with ``=`` inside it needs a name.
    """
    tokens: list[Token] = []
    seen: dict[str, int] = {}
    secrets: dict[str, int] = {}
    position = 0
    for raw in text.split(","):
        entry = raw.strip()
        if not entry:
            continue
        position += 1
        where = f"COMPOSER_API_TOKENS entry {position}"
        left, sep, role_text = entry.rpartition(":")
        name, eq, secret = left.partition("=")
        named = bool(eq and name.strip() and secret and not secret.startswith("="))
        if not named:
            name, secret = "", left
        name, secret = name.strip(), secret.strip()
        if not sep or not secret:
            raise ValueError(
                f"{where} ({_redact(entry)!r}) is not name=token:role (or token:role); {_ROLES}"
            )
        try:
            role = Role[role_text.strip().upper()]
        except KeyError:
            raise ValueError(
                f"{where} ({_redact(entry)!r}) has unknown role {role_text.strip()!r}; "
                "use admin, operator or viewer"
            ) from None
        if named and not NAME.fullmatch(name):
            # the name is not quoted: with a token that has '=' in it, it would be its start
            raise ValueError(
                f"{where}: the text before '=' is not a token name: use {_NAME_RULE} "
                "characters (a token with '=' in it needs a name: name=token:role)"
            )
        if not named:
            name = default_name(secret, role)
        if name in seen:
            again = "the same token is listed twice" if not named else "names must be unique"
            raise ValueError(
                f"{where} is named {name!r}, as entry {seen[name]} is: {again}; "
                "give each token a name of its own (name=token:role)"
            )
        if secret in secrets:
            raise ValueError(
                f"{where} has the same token as entry {secrets[secret]}: one token, one "
                "name and one role; remove one of them"
            )
        seen[name] = position
        secrets[secret] = position
        tokens.append(Token(name, secret.encode(), role, derived_name=not named))
    return tokens


def _redact(entry: str) -> str:
    """The entry with its token cut to two characters (an error must not print it)."""
    left, _, role = entry.rpartition(":")
    name, eq, secret = left.partition("=")
    if not (eq and name.strip() and secret and not secret.startswith("=")):
        name, secret = "", left
    shown = (secret.strip()[:2] or entry[:2]) + "…"
    prefix = f"{name.strip()}=" if name else ""
    return f"{prefix}{shown}:{role}" if left else shown


class Authenticator:
    def __init__(self, tokens: list[Token]) -> None:
        self._tokens = tokens

    @property
    def configured(self) -> bool:
        return bool(self._tokens)

    def caller_of(self, authorization: str | None) -> Caller:
        """The name and role of the request's bearer token; raise a 401 problem when
        there is none, or it is not one of ours."""
        if not self._tokens:
            raise ApiProblem(
                401,
                "unauthorized",
                "this api-gateway has no API tokens configured: set COMPOSER_API_TOKENS "
                "(name=token:role,…) where it runs",
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
        found: Token | None = None
        for token in self._tokens:  # every token, always: no early exit on a match
            if hmac.compare_digest(token.secret, presented):
                found = token
        if found is None:
            raise ApiProblem(401, "unauthorized", "unknown API token")
        return Caller(found.name, found.role)

    @staticmethod
    def require(role: Role, needed: Role, action: str) -> None:
        if role < needed:
            raise ApiProblem(
                403,
                "forbidden",
                f"{action} needs the {needed.label} role; this token is {role.label}",
            )
