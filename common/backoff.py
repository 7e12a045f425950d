"""Capped exponential backoff with full jitter that obeys a server's Retry-After.

A Retry-After is taken as given, as client-go does: the server said when, so our own
exponential ceiling must not stretch it (waiting longer only delays convergence) and it does
not count as an exponential step (it still counts in `attempts`, the failures in a row).
Only the floor (never spin on `Retry-After: 0`) and a cap (a bad header must not park us for
days) apply. `urgent=True` bounds the ceiling at
`urgent_cap` for a caller that holds a change nobody has seen yet and must notice quickly
when the server is back; full jitter and the floor still apply.

Time and randomness are injected: production passes `asyncio.sleep` and `random.random`;
tests pass a recording sleep that never really waits (see `RecordingSleep`), so a run of
twenty failures takes milliseconds and the chosen delays can be asserted.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

__all__ = ["Backoff", "BackoffPolicy", "RecordingSleep", "Sleep", "sleep_until_set"]

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
    # Ceiling while a change waits to be delivered (see `next_delay(urgent=True)`).
    urgent_cap: float = 1.5

    def __post_init__(self) -> None:
        if (
            not 0 <= self.floor <= self.initial <= self.cap
            or self.multiplier < 1
            or not self.floor <= self.urgent_cap
        ):
            raise ValueError(f"inconsistent backoff policy: {self}")


class Backoff:
    """Stateful attempt counter; `reset()` after a success."""

    __slots__ = ("_attempt", "_failures", "_policy", "_random")

    def __init__(
        self, policy: BackoffPolicy | None = None, *, rand: Callable[[], float] = random.random
    ) -> None:
        self._policy = policy or BackoffPolicy()
        self._random = rand
        self._attempt = 0  # exponential steps taken
        self._failures = 0

    @property
    def attempts(self) -> int:
        """Failures since the last reset, Retry-After ones included."""
        return self._failures

    def reset(self) -> None:
        self._attempt = 0
        self._failures = 0

    def next_delay(self, *, retry_after: float | None = None, urgent: bool = False) -> float:
        """Seconds to wait before the next attempt.

        With `retry_after` (seconds, as the server sent it): exactly that, floored and capped,
        and the exponential attempt count is left alone. Otherwise full jitter under a
        ceiling that doubles per failure; `urgent` bounds that ceiling at `urgent_cap`.
        """
        p = self._policy
        self._failures += 1
        if retry_after is not None:
            # The server said when: earlier only earns another 429, later only delays us.
            return min(max(p.floor, retry_after), p.retry_after_cap)
        # Exponent capped so a long outage cannot overflow the float.
        ceiling = min(p.cap, p.initial * p.multiplier ** min(self._attempt, 64))
        self._attempt += 1
        if urgent:
            ceiling = min(ceiling, p.urgent_cap)
        return max(p.floor, self._random() * ceiling)

    def urgent_delay(self) -> float:
        """A jittered short pause (floor to `urgent_cap`) for a change that just arrived."""
        p = self._policy
        return max(p.floor, self._random() * p.urgent_cap)


class RecordingSleep:
    """A test-mode sleep: records each requested delay and only yields to the event loop."""

    __slots__ = ("delays",)

    def __init__(self) -> None:
        self.delays: list[float] = []

    async def __call__(self, seconds: float) -> None:
        self.delays.append(seconds)
        await asyncio.sleep(0)


async def sleep_until_set(sleep: Sleep, seconds: float, *events: asyncio.Event) -> None:
    """`sleep(seconds)`, cut short as soon as any of `events` is set.

    The injected `sleep` keeps tests from really waiting; the caller reads which event woke
    it from the events themselves. Every helper task is cancelled and awaited before return,
    so none outlives the call.
    """
    waiters: set[asyncio.Future[object]] = {asyncio.ensure_future(sleep(seconds))}
    waiters.update(asyncio.ensure_future(event.wait()) for event in events)
    try:
        await asyncio.wait(waiters, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for task in waiters:
            task.cancel()
        await asyncio.gather(*waiters, return_exceptions=True)
