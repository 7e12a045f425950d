"""Capped exponential backoff with full jitter that honours a server's Retry-After.

Time and randomness are injected: production passes `asyncio.sleep` and `random.random`;
tests pass a recording sleep that never really waits (see `RecordingSleep`), so a run of
twenty failures takes milliseconds and the chosen delays can be asserted.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

__all__ = ["Backoff", "BackoffPolicy", "RecordingSleep", "Sleep"]

Sleep = Callable[[float], Awaitable[None]]


@dataclass(frozen=True, slots=True)
class BackoffPolicy:
    """Delay ceiling for attempt n (0-based) is min(cap, initial * multiplier**n)."""

    initial: float = 0.5
    multiplier: float = 2.0
    cap: float = 60.0
    # Full jitter may pick ~0; a floor keeps a failing loop from hammering the API server.
    floor: float = 0.1
    # A Retry-After longer than this is treated as this (a bad header must not park us for days).
    retry_after_cap: float = 300.0

    def __post_init__(self) -> None:
        if not 0 <= self.floor <= self.initial <= self.cap or self.multiplier < 1:
            raise ValueError(f"inconsistent backoff policy: {self}")


class Backoff:
    """Stateful attempt counter; `reset()` after a success."""

    __slots__ = ("_attempt", "_policy", "_random")

    def __init__(
        self, policy: BackoffPolicy | None = None, *, rand: Callable[[], float] = random.random
    ) -> None:
        self._policy = policy or BackoffPolicy()
        self._random = rand
        self._attempt = 0

    @property
    def attempts(self) -> int:
        """Failures since the last reset."""
        return self._attempt

    def reset(self) -> None:
        self._attempt = 0

    def next_delay(self, *, retry_after: float | None = None) -> float:
        """Seconds to wait before the next attempt; counts this failure."""
        p = self._policy
        # Exponent capped so a long outage cannot overflow the float.
        ceiling = min(p.cap, p.initial * p.multiplier ** min(self._attempt, 64))
        self._attempt += 1
        delay = max(p.floor, self._random() * ceiling)
        if retry_after is not None and retry_after > 0:
            # The server said when; waiting less would only earn another 429.
            delay = max(delay, min(retry_after, p.retry_after_cap))
        return delay


class RecordingSleep:
    """A test-mode sleep: records each requested delay and only yields to the event loop."""

    __slots__ = ("delays",)

    def __init__(self) -> None:
        self.delays: list[float] = []

    async def __call__(self, seconds: float) -> None:
        self.delays.append(seconds)
        await asyncio.sleep(0)
