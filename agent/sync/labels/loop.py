"""The reconcile loop: make the Node's owned labels and annotation equal the discovered ones.

One reconcile = discover, GET the node, PATCH only the owned keys that differ (nothing when
equal, so a restart on unchanged hardware writes nothing). Reconciles run at start, every
resync interval (repairing hand edits, picking up hardware changes) and right after a poke
from the cache watcher; pokes arriving meanwhile coalesce into one. Failures never end the
loop: API errors and a missing node back off (capped, jittered) and a failed discovery keeps
publishing the last good result instead of deleting labels. A server's Retry-After is obeyed
exactly. While a change waits to be published (a cache event, or discovery differing from
what was last published), the backoff ceiling drops to `urgent_cap` and a poke during a
backoff cuts the wait short, so the change lands within about a second of the API answering
again; with nothing new to say the loop backs off all the way (a fleet restarting into an
outage must not hammer the API server).
Each reconcile is reported as a frozen `Reconciled` record; `log_event` and the metrics
consume them.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Literal, Protocol

from agent.discovery.discover import Discovery, DiscoveryError
from agent.position.derive import Positioner, PositionFacts
from agent.sync.labels.node_client import ApiCall, NodeApiError, NodeNotFound, NodeState
from agent.sync.labels.node_diff import Change, NodeMeta, changes_between, describe, patch_for
from common.backoff import Backoff, Sleep, sleep_until_set

__all__ = [
    "NodeApi",
    "Reconciled",
    "Result",
    "SyncEvent",
    "SyncLoop",
    "Trigger",
    "log_event",
]

log = logging.getLogger(__name__)

Trigger = Literal["start", "resync", "cache", "retry"]
Result = Literal["patched", "unchanged", "node_missing", "api_error", "discovery_error"]


class NodeApi(Protocol):
    async def get(self, name: str) -> NodeState: ...
    async def patch(self, name: str, body: Mapping[str, Any]) -> NodeState: ...


@dataclass(frozen=True, slots=True)
class Reconciled:
    """What one reconcile did. `synced`: the node now shows what we meant to publish."""

    node: str
    trigger: Trigger
    reason: str
    result: Result
    synced: bool
    changes: tuple[Change, ...]
    owned_labels: int
    discovery_seconds: float | None
    error: str | None
    next_in: float
    at: float  # wall-clock seconds, for "last successful sync"
    retry_after: float | None = None  # the server's Retry-After, when it sent one
    urgent: bool = False  # a change waits to be published: retry soon


SyncEvent = Reconciled | ApiCall


def log_event(event: SyncEvent) -> None:
    """The loop's log lines: what changed and why, or what failed and when we try again."""
    if isinstance(event, ApiCall):
        return
    fields = {"node": event.node, "trigger": event.trigger, "reason": event.reason}
    if event.changes:
        log.info(
            "node updated: %s",
            "; ".join(describe(c) for c in event.changes),
            extra={**fields, "changes": len(event.changes)},
        )
    if event.result == "node_missing":
        log.warning("node not found; retrying in %.1fs", event.next_in, extra=fields)
    elif event.result in ("api_error", "discovery_error"):
        log.warning(
            "%s: %s; retrying in %.1fs",
            event.result.replace("_", " "),
            event.error,
            event.next_in,
            extra={**fields, "kept_last_good": event.synced},
        )
    elif event.result == "unchanged" and event.trigger == "start":
        log.info("node labels already up to date", extra=fields)


class SyncLoop:
    """Keeps one node in sync until `run(stop)` sees `stop` set."""

    def __init__(
        self,
        nodes: NodeApi,
        discover: Callable[[], Discovery],
        *,
        node_name: str,
        resync_interval: float,
        emit: Callable[[SyncEvent], None] = log_event,
        sleep: Sleep = asyncio.sleep,
        clock: Callable[[], float] = time.monotonic,
        wall_clock: Callable[[], float] = time.time,
        backoff: Backoff | None = None,
        cache_settle: float = 0.25,
    ) -> None:
        if resync_interval <= 0:
            raise ValueError("resync_interval must be positive")
        self._nodes = nodes
        self._discover = discover
        self._node = node_name
        self._resync = resync_interval
        self._emit = emit
        self._sleep = sleep
        self._clock = clock
        self._wall = wall_clock
        self._backoff = backoff or Backoff()
        self._settle = cache_settle
        self._poked = asyncio.Event()
        self._poke_reason = ""
        self._last_good: NodeMeta | None = None
        # The node's network position is merged with the labels other tools put on the Node
        # (they win), so it is settled only once the Node is read.
        self._position = PositionFacts()
        self._positioner = Positioner()
        self._published: NodeMeta | None = None  # what the node showed after the last sync
        self._pokes = 0  # pokes ever received; `_delivered` = those a sync has covered
        self._delivered = 0

    def poke(self, reason: str) -> None:
        """Ask for a reconcile soon (cache watcher). Many pokes before it runs count as one."""
        self._poke_reason = reason
        self._pokes += 1
        self._poked.set()

    async def run(self, stop: asyncio.Event) -> None:
        trigger: Trigger | None = "start"
        reason = "agent started"
        while trigger is not None and not stop.is_set():
            if trigger == "cache":
                # A burst (rename + marker, or a batch split by the watcher's debounce) often
                # pokes twice; a short pause lets both land in this one pass.
                await self._sleep(self._settle)
            event = await self.reconcile(trigger, reason)
            self._emit(event)
            trigger = await self._wait(event, stop=stop)
            reason = {
                "cache": self._poke_reason,
                "resync": "resync interval",
                "retry": "retry after failure",
            }.get(trigger or "", "")

    async def _wait(self, event: Reconciled, *, stop: asyncio.Event) -> Trigger | None:
        """Sleep `event.next_in`. A healthy loop wakes for a poke at once; a failing one
        shortens its backoff to an urgent pause, unless the server's Retry-After rules."""
        healthy = event.synced
        if healthy and self._poked.is_set():
            return "cache"
        listen = healthy or event.retry_after is None
        started = self._clock()
        woke = await self._nap(event.next_in, stop=stop, listen=listen)
        if woke == "stop":
            return None
        if woke == "slept":
            return "resync" if healthy else "retry"
        if healthy:
            return "cache"
        # A change arrived during a backoff: try again soon, but never sooner than the floor.
        left = event.next_in - (self._clock() - started)
        pause = min(left, self._backoff.urgent_delay())
        if pause > 0 and await self._nap(pause, stop=stop, listen=False) == "stop":
            return None
        return "retry"

    async def _nap(
        self, delay: float, *, stop: asyncio.Event, listen: bool
    ) -> Literal["slept", "poked", "stop"]:
        if listen and self._poked.is_set():
            return "poked"
        await sleep_until_set(self._sleep, delay, stop, *([self._poked] if listen else []))
        if stop.is_set():
            return "stop"
        if listen and self._poked.is_set():
            return "poked"
        return "slept"

    async def _discover_desired(self) -> tuple[NodeMeta | None, float, str | None]:
        started = self._clock()
        try:
            found = await asyncio.to_thread(self._discover)
        except (DiscoveryError, OSError) as exc:
            return self._last_good, self._clock() - started, f"discovery failed: {exc}"
        self._last_good = NodeMeta(labels=dict(found.labels), annotations=dict(found.annotations))
        self._position = found.position
        return self._last_good, self._clock() - started, None

    async def reconcile(self, trigger: Trigger, reason: str = "") -> Reconciled:
        """One pass: discover, compare, patch if needed. Never raises for transient failures."""
        self._poked.clear()  # pokes from now on deserve another pass
        covered = self._pokes
        desired, seconds, discovery_error = await self._discover_desired()
        changes: tuple[Change, ...] = ()
        error = discovery_error
        retry_after: float | None = None
        synced = False
        if desired is None:
            result: Result = "discovery_error"
        else:
            try:
                current = await self._nodes.get(self._node)
                target = NodeMeta(
                    labels=self._positioner.apply(
                        desired.labels, self._position, current.meta.labels
                    ),
                    annotations=desired.annotations,
                )
                changes = changes_between(current.meta, target)
                body = patch_for(changes)
                if body is not None:
                    await self._nodes.patch(self._node, body)
                synced = True
                result = "patched" if changes else "unchanged"
            except NodeNotFound as exc:
                result, error, changes = "node_missing", str(exc), ()
            except NodeApiError as exc:
                result, error, changes = "api_error", str(exc), ()
                retry_after = exc.retry_after
            if synced and discovery_error is not None:
                result = "discovery_error"  # published the last good result; retry discovery
        if synced:
            self._published, self._delivered = desired, covered
        # Something the node has not seen yet: a poke no sync covered, or new discovery.
        urgent = not synced and (
            self._pokes > self._delivered
            or (self._published is not None and desired not in (None, self._published))
        )
        if result in ("patched", "unchanged"):
            self._backoff.reset()
            next_in = self._resync
        else:
            next_in = self._backoff.next_delay(retry_after=retry_after, urgent=urgent)
        return Reconciled(
            node=self._node,
            trigger=trigger,
            reason=reason,
            result=result,
            synced=synced,
            changes=changes,
            owned_labels=len(desired.labels) if desired is not None else 0,
            discovery_seconds=seconds if discovery_error is None else None,
            error=error,
            next_in=next_in,
            at=self._wall(),
            retry_after=retry_after,
            urgent=urgent,
        )
