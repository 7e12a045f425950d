"""A hand-driven clock and an in-memory object store for the publisher's tests."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Mapping
from typing import Any

from agent.nrt.client import CrdMissing

__all__ = ["ManualTime", "MemoryStore", "until"]


class ManualTime:
    """`clock()` and `sleep()` for the publisher: time moves only by `advance()`."""

    def __init__(self) -> None:
        self.now = 0.0
        self._sleepers: list[tuple[float, asyncio.Future[None]]] = []

    def clock(self) -> float:
        return self.now

    async def sleep(self, seconds: float) -> None:
        if seconds <= 0:
            await asyncio.sleep(0)
            return
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        entry = (self.now + seconds, fut)
        self._sleepers.append(entry)
        try:
            await fut
        finally:
            if entry in self._sleepers:
                self._sleepers.remove(entry)

    def advance(self, seconds: float) -> None:
        """Move time on and wake the sleepers it reaches (no longer `waiting` from then)."""
        self.now += seconds
        for entry in list(self._sleepers):
            deadline, fut = entry
            if deadline <= self.now:
                self._sleepers.remove(entry)
                if not fut.done():
                    fut.set_result(None)

    @property
    def waiting(self) -> bool:
        return bool(self._sleepers)


class MemoryStore:
    """The one object, as the API server would keep it; `crd` False answers CrdMissing."""

    def __init__(self) -> None:
        self.obj: dict[str, Any] | None = None
        self.crd = True
        self.gets = 0
        self.writes: list[tuple[float, dict[str, Any]]] = []
        self.clock: Callable[[], float] = time.monotonic

    async def node_uid(self, name: str) -> str:
        return f"uid-{name}"

    def _check(self) -> None:
        if not self.crd:
            raise CrdMissing("the API server does not serve noderesourcetopologies")

    async def get(self, name: str) -> dict[str, Any] | None:
        self.gets += 1
        self._check()
        return self.obj

    async def create(self, body: Mapping[str, Any]) -> None:
        self._check()
        self.obj = dict(body)
        self.writes.append((self.clock(), dict(body)))

    async def patch(self, name: str, body: Mapping[str, Any]) -> None:
        self._check()
        assert self.obj is not None
        self.obj = {**self.obj, **body}
        self.writes.append((self.clock(), dict(body)))


async def until(condition: Callable[[], bool], *, within: float = 5.0) -> None:
    """Wait for `condition` (checked as the event loop turns), failing after `within` s."""
    deadline = time.monotonic() + within
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError("condition not reached in time")
        await asyncio.sleep(0.001)
