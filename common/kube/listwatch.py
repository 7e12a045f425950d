"""List, then watch from the list's resourceVersion, until cancelled: the one loop behind every
cache of API objects (the webhook's node, NodeResourceTopology and template caches, the claims
reconciler's triggers, the agent's pod leases). A cache only says what it does with the listed
snapshot (`on_list`) and with each ADDED/MODIFIED/DELETED object (`on_event`).

- The watch asks for bookmarks, so a quiet resource's resourceVersion keeps moving and a
  resume stays inside the server's history window.
- A watch that ends (its timeoutSeconds, a dropped connection, a 5xx, a refused connection)
  resumes from the last resourceVersion seen: the server replays what happened since, so
  nothing is listed again.
- 410 Gone, as an answer or as an ERROR event, means that version was compacted away: list
  again. Straight after a list (no event since) it backs off first, so a server that keeps
  answering 410 cannot make us relist in a tight loop.
- A handler's own error (`handler_errors`) or an unreadable event relists after a backoff:
  the cache may have missed that change.
- Failures back off (common/backoff.py, Retry-After honoured); one before the first list says
  the cache is not full yet (a throttled or slow API server at start-up). The backoff is
  reset only after a healthy watch, one that delivered an event or stayed open `HEALTHY_S`:
  a server that accepts every watch and closes it at once is paced like one that refuses it.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any

import aiohttp

from common.backoff import Backoff, Sleep
from common.kube.read import ApiError, list_all, watch_events

__all__ = ["HEALTHY_S", "WATCH_SECONDS", "ListWatch", "Snapshot"]

logger = logging.getLogger(__name__)

WATCH_SECONDS = 290  # timeoutSeconds: the server ends the watch then; we resume from there
HEALTHY_S = 1.0  # a watch open this long was no failure, even without an event
# connect, read: a list answers within a minute or the connection is dead
_LIST_TIMEOUT = (10.0, 60.0)
# Beyond timeoutSeconds, only a stream gone silent (the server ends the watch first).
_SILENCE_S = 60
_KINDS = ("ADDED", "MODIFIED", "DELETED")
# What a broken connection or a server answer raises; anything else is a bug and propagates.
_TRANSIENT = (ApiError, aiohttp.ClientError, TimeoutError, OSError)


@dataclass(frozen=True, slots=True)
class Snapshot:
    """One complete list: every item, the version to watch from, and when it was asked for
    (`time.time()`: anything written after that may be too new for the list)."""

    items: list[dict[str, Any]]
    resource_version: str
    asked_at: float


OnList = Callable[[Snapshot], Awaitable[None] | None]
OnEvent = Callable[[str, dict[str, Any]], Awaitable[None] | None]
# A caller's own answer to an API error: seconds to wait before listing again, or None for
# the usual backoff and log line (the NodeResourceTopology cache: 404, the CRD is absent).
OnApiError = Callable[[ApiError], float | None]


class _Relist(Exception):
    """The state may have a gap (410 Gone, a handler's error, an unreadable event)."""

    def __init__(self, cause: Exception, *, expired: bool = False) -> None:
        super().__init__(str(cause) or type(cause).__name__)
        self.expired = expired


class ListWatch:
    """`await ListWatch(core.list_node, what=…, on_list=…, on_event=…).run()` until cancelled.

    `call` is a kubernetes-asyncio list method; `params` its selectors (or a custom object's
    group, version, plural). `relist_after`: list again once a watch ends this many seconds
    after the last list (for a cache that sweeps what the list no longer holds).
    """

    def __init__(
        self,
        call: Callable[..., Awaitable[Any]],
        *,
        what: str,
        on_list: OnList,
        on_event: OnEvent,
        params: Mapping[str, Any] | None = None,
        backoff: Backoff | None = None,
        sleep: Sleep = asyncio.sleep,
        clock: Callable[[], float] = time.monotonic,
        watch_seconds: int = WATCH_SECONDS,
        relist_after: float | None = None,
        handler_errors: tuple[type[Exception], ...] = (),
        on_api_error: OnApiError | None = None,
        log: logging.Logger = logger,
    ) -> None:
        self._call = call
        self._what = what
        self._on_list = on_list
        self._on_event = on_event
        self._params = dict(params or {})
        self._backoff = backoff or Backoff()
        self._sleep = sleep
        self._clock = clock
        self._watch_seconds = watch_seconds
        self._relist_after = relist_after
        self._handler_errors = handler_errors
        self._on_api_error = on_api_error
        self._log = log
        self.resource_version = ""  # where the next watch starts; "" lists first
        self.lists = 0  # lists completed
        self.watches = 0  # watch requests made
        self.events = 0  # events delivered, bookmarks included
        self._listed_at = 0.0
        self._fresh = False  # listed, and no event since
        self._healthy = False  # the current watch delivered an event or stayed open

    async def run(self) -> None:
        while True:
            self._healthy = False
            try:
                if self._list_due():
                    await self._list()
                await self._watch()
            except _Relist as exc:
                delay = self._relisting(exc)
            except _TRANSIENT as exc:
                delay = self._failed(exc)
            else:
                delay = self._ended()
            if delay is not None:
                await self._sleep(delay)

    # --- the decisions ---------------------------------------------------------------------
    def _list_due(self) -> bool:
        if not self.resource_version:
            return True
        after = self._relist_after
        return after is not None and self._clock() - self._listed_at >= after

    def _next_delay(self, *, retry_after: float | None = None) -> float:
        if self._healthy:  # the failure ended a good watch: start the backoff over
            self._backoff.reset()
        return self._backoff.next_delay(retry_after=retry_after)

    def _ended(self) -> float | None:
        """The server ended the watch: resume at once, unless it ended it at once."""
        if self._healthy:
            self._backoff.reset()
            return None
        delay = self._backoff.next_delay()
        self._log.info(
            "%s: watch ended at once; reopening", self._what, extra={"retry_in_s": round(delay, 2)}
        )
        return delay

    def _relisting(self, exc: _Relist) -> float | None:
        fresh, self._fresh = self._fresh, False
        self.resource_version = ""
        if exc.expired and not fresh:  # routine: the watch fell behind a compaction
            self._log.info("%s: watch expired (410); listing again", self._what)
            if self._healthy:
                self._backoff.reset()
            return None
        # Expired straight after a list, or the state may have a gap: list, but not in a spin.
        delay = self._next_delay()
        self._log.log(
            logging.INFO if exc.expired else logging.WARNING,
            "%s: %s; listing again",
            self._what,
            "watch expired (410) right after a list" if exc.expired else "state may have a gap",
            extra={"error": str(exc), "retry_in_s": round(delay, 2)},
        )
        return delay

    def _failed(self, exc: Exception) -> float:
        if isinstance(exc, ApiError) and self._on_api_error is not None:
            own = self._on_api_error(exc)
            if own is not None:
                self.resource_version = ""  # whatever the caller dropped comes back by a list
                return own
        retry_after = exc.retry_after if isinstance(exc, ApiError) else None
        delay = self._next_delay(retry_after=retry_after)
        self._log.warning(
            # Before the first list the cache is empty: its users answer as if it were absent.
            "%s: list/watch failed; retrying"
            if self.lists
            else "%s: first list failed, the cache is not full yet; retrying",
            self._what,
            extra={"error": str(exc) or type(exc).__name__, "retry_in_s": round(delay, 2)},
        )
        return delay

    # --- the I/O ---------------------------------------------------------------------------
    async def _list(self) -> None:
        asked_at = time.time()
        try:
            items, version = await list_all(
                self._call, **self._params, _request_timeout=_LIST_TIMEOUT
            )
        except ApiError as exc:
            if exc.status == 410:  # a page's continue token expired
                raise _Relist(exc, expired=True) from exc
            raise
        except ValueError as exc:
            raise _Relist(exc) from exc
        await self._handle(self._on_list, Snapshot(items, version, asked_at))
        self.resource_version = version
        self._listed_at = self._clock()
        self._fresh = True
        self.lists += 1

    async def _watch(self) -> None:
        opened: float | None = None  # when the stream began (a refusal never does)
        self.watches += 1
        try:
            response = await self._call(
                **self._params,
                watch=True,
                resource_version=self.resource_version,
                allow_watch_bookmarks=True,
                timeout_seconds=self._watch_seconds,
                _preload_content=False,
                _request_timeout=self._watch_seconds + _SILENCE_S,
            )
            if response.status == 200:
                opened = self._clock()
            async for event in watch_events(response):
                await self._deliver(event)
        except ApiError as exc:
            if exc.status == 410:
                raise _Relist(exc, expired=True) from exc
            raise
        except ValueError as exc:
            raise _Relist(exc) from exc
        finally:
            if opened is not None and self._clock() - opened >= HEALTHY_S:
                self._healthy = True

    async def _deliver(self, event: Mapping[str, Any]) -> None:
        kind = event.get("type")
        obj = event.get("object") or {}
        if kind == "ERROR":
            code = int(obj.get("code") or 0)
            raise ApiError(code, str(obj.get("message") or "watch error"))
        if kind in _KINDS:
            await self._handle(self._on_event, kind, obj)
        elif kind != "BOOKMARK":
            raise ValueError(f"unknown watch event type {kind!r}")
        version = (obj.get("metadata") or {}).get("resourceVersion")
        if version:
            self.resource_version = str(version)
        self.events += 1
        self._fresh = False
        self._healthy = True

    async def _handle(self, handler: Callable[..., Awaitable[None] | None], *args: Any) -> None:
        try:
            result = handler(*args)
            if inspect.isawaitable(result):
                await result
        except self._handler_errors as exc:
            raise _Relist(exc) from exc
