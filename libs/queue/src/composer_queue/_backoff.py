"""One backoff for every retry loop: exponential growth, capped, with jitter.

Jitter matters here: after Redis or the coordinator comes back, every worker
and service retries; without jitter they all retry at the same instants and
hit it together. "Decorrelated jitter" (each delay drawn between ``initial``
and three times the previous one, capped) spreads them while keeping the
average growth exponential.
"""

from __future__ import annotations

import random
from collections.abc import Callable


class Backoff:
    """Delays for successive retries: ``next()`` after a failure, ``reset()`` after a success.

    >>> b = Backoff(0.1, 5.0)
    >>> 0.1 <= b.next() <= 0.3
    True
    """

    def __init__(
        self, initial: float, maximum: float, *, rand: Callable[[float, float], float] | None = None
    ) -> None:
        if not 0 < initial <= maximum:
            raise ValueError(f"backoff needs 0 < initial <= maximum, got {initial} and {maximum}")
        self.initial = initial
        self.maximum = maximum
        self._rand = rand or random.uniform
        self._last = initial
        #: Failures since the last reset.
        self.failures = 0

    def next(self) -> float:
        """The delay before the next retry (seconds); counts one failure."""
        self.failures += 1
        self._last = min(self.maximum, self._rand(self.initial, self._last * 3))
        return self._last

    def reset(self) -> None:
        self._last = self.initial
        self.failures = 0
