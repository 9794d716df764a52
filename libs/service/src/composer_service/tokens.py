"""Which tokens a service accepts as secrets: one rule for the API tokens (api-gateway),
the worker tokens (coordinator) and the webhook signing secret (outbox-enqueuer).

A token that is printed in this repository (the old development defaults, the
Kubernetes Secret's ``CHANGE-ME`` placeholders) or guessable is no secret: whoever
holds an admin API token can run code on the workers through a PYTHON node. So
outside development mode (``COMPOSER_DEV_MODE``) a service refuses to start with
one, naming the variable and how to make a good one; in development mode it starts
and warns. The rule reads no environment: the services pass their settings in.

Guessable is judged by an estimate of the token's entropy, not its length: 32 times ``a``
is 32 characters and no secret. The estimate (:func:`estimated_bits`) looks only at
the characters the token uses, so it cannot tell a memorable phrase from random
characters; it catches what a person types to get past a length rule (one character
repeated, a pattern repeated, a run like ``abcdef…``), never refuses what
``secrets.token_urlsafe(32)`` or ``secrets.token_hex(16)`` makes, and says how many
bits it found.
"""

from __future__ import annotations

import itertools
import math
import string
from collections import Counter
from collections.abc import Hashable, Iterable, Sequence

from composer_service.entry import StartupError

#: The fewest estimated bits of entropy a token needs (``secrets.token_urlsafe(32)``
#: holds 256; ``secrets.token_hex(16)``, 32 hex digits, exactly 128).
MIN_TOKEN_BITS = 128
#: The development defaults Composer used to ship.
WELL_KNOWN_TOKENS = frozenset({"dev-token", "dev-worker-token", "dev-builtin-worker-token"})
#: What deploy/k8s/secret.yaml's placeholders start with (in any case).
PLACEHOLDER = "CHANGE-ME"
GENERATE_HINT = "python -c 'import secrets; print(secrets.token_urlsafe(32))'"
#: A token whose characters (or the steps between them) are less varied than this share
#: of what random characters of its length show is patterned: random ones sit 10
#: standard deviations above it (hex, UUIDs, URL-safe base64; measured).
_PATTERNED = 0.5
_HEX = (frozenset("0123456789abcdef"), frozenset("0123456789ABCDEF"))
_CLASSES = (
    (frozenset(string.digits), 10),
    (frozenset(string.ascii_lowercase), 26),
    (frozenset(string.ascii_uppercase), 26),
    (frozenset("-_"), 2),  # URL-safe base64's two
)
_OTHER = 32  # any other character: punctuation and beyond


class WeakTokenError(StartupError):
    """A configured token is well-known, a placeholder or guessable; the message names each
    one's variable and the fix (``composer_service.run`` exits 2 with it)."""


def alphabet_size(token: str) -> int:
    """How many characters each of the token's could have been: 16 for hex digits (one
    case), else the sum of the classes it draws on (digits 10, lower and upper case 26
    each, ``-`` and ``_`` 2, anything else 32)."""
    used = frozenset(token)
    if any(used <= hexdigits for hexdigits in _HEX) and not used <= frozenset(string.digits):
        return 16
    size = sum(n for chars, n in _CLASSES if used & chars)
    known = frozenset().union(*(chars for chars, _ in _CLASSES))
    return size + (_OTHER if used - known else 0)


def estimated_bits(token: str) -> float:
    """At most the token's length times log2 of its alphabet; a token that repeats itself
    counts its period only; one whose characters, or the steps between neighbours, are
    patterned (see ``_PATTERNED``) counts only their Shannon entropy."""
    n = len(token)
    if n == 0:
        return 0.0
    size = alphabet_size(token)
    per_character = math.log2(size) if size > 1 else 0.0
    estimate = _period(token) * per_character
    if n < 2:
        return estimate
    if _variety(token, size) < _PATTERNED:
        estimate = min(estimate, n * _entropy(token))
    steps = [ord(b) - ord(a) for a, b in itertools.pairwise(token)]
    if _variety(steps, 2 * size - 1) < _PATTERNED:  # abcdef…, 13579…
        estimate = min(estimate, per_character + len(steps) * _entropy(steps))
    return estimate


def _period(token: str) -> int:
    """The length of the shortest piece the token repeats (its length when none)."""
    n = len(token)
    for p in range(1, n // 2 + 1):
        if token[p:] == token[:-p]:
            return p
    return n


def _entropy(symbols: Sequence[Hashable]) -> float:
    """Shannon entropy, bits per symbol, of the symbols' own frequencies."""
    n = len(symbols)
    return sum(c / n * math.log2(n / c) for c in Counter(symbols).values())


def _variety(symbols: Sequence[Hashable], alphabet: int) -> float:
    """The symbols' entropy as a share of the most ``len(symbols)`` symbols of that
    alphabet could show (1: as varied as can be; 0: one symbol repeated)."""
    most = math.log2(min(len(symbols), alphabet))
    return _entropy(symbols) / most if most > 0 else 0.0


def token_weakness(token: str) -> str | None:
    """Why ``token`` is no secret (a phrase that never quotes a real secret), or None."""
    if not token:
        return "is empty"
    if token in WELL_KNOWN_TOKENS:
        return f"is the well-known development token {token!r}"
    if token.upper().startswith(PLACEHOLDER):
        return f"is a {PLACEHOLDER} placeholder"
    bits = estimated_bits(token)
    if bits < MIN_TOKEN_BITS:
        return (
            f"is guessable: about {bits:.0f} bits of entropy estimated from its "
            f"{len(token)} characters (at least {MIN_TOKEN_BITS} needed)"
        )
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
        f"{found}. A token must be a random secret of at least {MIN_TOKEN_BITS} bits "
        f"(43 random URL-safe characters hold 256): generate one with: {GENERATE_HINT} "
        "(on a development machine only, COMPOSER_DEV_MODE=true accepts weak tokens)"
    )
