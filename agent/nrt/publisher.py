"""Keeps this node's NodeResourceTopology equal to what the kubelet's PodResources says.

Event-driven: `poke()` (a pod on this node started, changed or went) asks for a pass now and
a few follow-up passes (`settle`: the kubelet may release a pod's CPUs and devices a moment
after the API server shows it gone). A pass reads PodResources (a local gRPC call), computes
the body and writes only when it differs from what was last written; writes are at least
`min_interval` apart (a burst of pod events costs at most one write per second, the last one
carrying the final state). Every `recheck` seconds a pass also GETs the object, so a hand
edit, a deleted object or an allocation change without a pod event (a device turning
unhealthy) is repaired; with nothing changed that pass writes nothing.

Bad input never stops the agent: without the CRD the publisher logs once, labels go on, and
it asks the API server again after a backoff (30 s doubling to 10 min); without PodResources
it logs once per kind of failure and tries again on the next poke or recheck.
"""

from __future__ import annotations

import asyncio
import heapq
import logging
import time
from collections.abc import Callable, Mapping
from typing import Any, Protocol

from agent.nrt.body import NodeRef
from agent.nrt.client import CRD_NAME, CrdMissing, TopologyApiError
from agent.sources.podresources import PodResourcesError
from common.backoff import Backoff, BackoffPolicy, Sleep, sleep_until_set

__all__ = ["Publisher", "TopologyStore", "owned_part"]

log = logging.getLogger(__name__)

_OWNED = ("topologyPolicies", "attributes", "zones")
_SETTLE = (1.0, 3.0, 7.0)
_CRD_BACKOFF = BackoffPolicy(initial=30.0, cap=600.0, floor=30.0, urgent_cap=30.0)


class TopologyStore(Protocol):
    async def node_uid(self, name: str) -> str: ...
    async def get(self, name: str) -> dict[str, Any] | None: ...
    async def create(self, body: Mapping[str, Any]) -> None: ...
    async def patch(self, name: str, body: Mapping[str, Any]) -> None: ...


def owned_part(obj: Mapping[str, Any]) -> dict[str, Any]:
    """What the agent writes and compares: fields it owns, and the owner reference."""
    meta = obj.get("metadata") or {}
    part = {k: obj.get(k) for k in _OWNED}
    part["ownerReferences"] = [
        {k: ref.get(k) for k in ("apiVersion", "kind", "name", "uid")}
        for ref in meta.get("ownerReferences") or []
    ]
    return part


class Publisher:
    """`run(stop)` publishes; `poke()` says PodResources may have changed; `writes` counts."""

    def __init__(
        self,
        store: TopologyStore,
        read: Callable[[NodeRef], dict[str, Any]],
        *,
        node_name: str,
        on_write: Callable[[], None] = lambda: None,
        on_current: Callable[[], None] = lambda: None,
        clock: Callable[[], float] = time.monotonic,
        sleep: Sleep = asyncio.sleep,
        min_interval: float = 1.0,
        settle: tuple[float, ...] = _SETTLE,
        recheck: float = 60.0,
        crd_backoff: Backoff | None = None,
    ) -> None:
        self._store = store
        self._read = read  # blocking: PodResources and sysfs; run in a thread
        self._name = node_name
        self._on_write = on_write
        self._on_current = on_current  # the object is known to match the node (freshness metric)
        self._clock = clock
        self._sleep = sleep
        self._min_interval = min_interval
        self._settle = settle
        self._recheck = recheck
        self._crd_backoff = crd_backoff or Backoff(_CRD_BACKOFF)
        self._node: NodeRef | None = None  # the owner reference needs the Node's uid
        self._wake = asyncio.Event()
        self._due: list[float] = []  # pass times, a heap
        self._written: dict[str, Any] | None = None  # owned part of the object as last seen
        self._verified = False  # _written reflects the server (else GET before comparing)
        self._last_write = float("-inf")
        self._next_recheck = 0.0
        self._read_trouble: str | None = None  # the kind last logged, to log once
        self._crd_logged = False
        self._parked_until = float("-inf")  # no CRD: pokes wait for the next look
        self.writes = 0
        self.passes = 0

    @property
    def poked(self) -> bool:
        """A poke arrived that no pass has served yet."""
        return self._wake.is_set()

    def poke(self) -> None:
        now = self._clock()
        if now < self._parked_until:
            return
        for delay in (0.0, *self._settle):
            heapq.heappush(self._due, now + delay)
        self._wake.set()

    async def run(self, stop: asyncio.Event) -> None:
        self._next_recheck = self._clock()  # the first pass verifies against the server
        while not stop.is_set():
            now = self._clock()
            due = min(self._due[0] if self._due else self._next_recheck, self._next_recheck)
            if due > now:
                await self._wait(due - now, stop)
                continue
            while self._due and self._due[0] <= now:
                heapq.heappop(self._due)
            verify = now >= self._next_recheck
            if verify:
                self._next_recheck = now + self._recheck
            try:
                await self._pass(verify=verify)
            except CrdMissing as exc:
                self._crd_missing(exc)
            except TopologyApiError as exc:
                # The object may differ from what we think (conflict, gone): look again.
                self._verified = False
                log.warning("cannot publish NodeResourceTopology %s: %s", self._name, exc)
                heapq.heappush(self._due, self._clock() + max(self._min_interval, 5.0))

    async def _wait(self, seconds: float, stop: asyncio.Event) -> None:
        self._wake.clear()
        await sleep_until_set(self._sleep, seconds, self._wake, stop)

    async def _pass(self, *, verify: bool) -> None:
        self.passes += 1
        if self._node is None:
            self._node = NodeRef(self._name, await self._store.node_uid(self._name))
        try:
            body = await asyncio.to_thread(self._read, self._node)
        except PodResourcesError as exc:
            if self._read_trouble != exc.kind:
                log.warning(
                    "cannot publish NodeResourceTopology %s: %s (labels are unaffected; "
                    "trying again when a pod changes or in %.0fs)",
                    self._name,
                    exc,
                    self._recheck,
                )
                self._read_trouble = exc.kind
            return
        if self._read_trouble is not None:
            log.info("PodResources readable again: publishing NodeResourceTopology %s", self._name)
            self._read_trouble = None
        if verify or not self._verified:
            current = await self._store.get(self._name)
            self._written = owned_part(current) if current is not None else None
            self._verified = True
            if self._crd_logged:
                log.info("%s is served now: publishing NodeResourceTopology %s", CRD_NAME,
                         self._name)  # fmt: skip
                self._crd_logged = False
            self._crd_backoff.reset()
        wanted = owned_part(body)
        if wanted == self._written:
            self._on_current()
            return
        wait = self._last_write + self._min_interval - self._clock()
        if wait > 0:  # at most one write per min_interval: come back then
            heapq.heappush(self._due, self._clock() + wait)
            return
        if self._written is None:
            await self._store.create(body)
        else:
            await self._store.patch(self._name, {k: body[k] for k in ("metadata", *_OWNED)})
        self._written = wanted
        self._last_write = self._clock()
        self.writes += 1
        self._on_write()
        self._on_current()

    def _crd_missing(self, exc: CrdMissing) -> None:
        self._verified = False
        delay = self._crd_backoff.next_delay()
        if not self._crd_logged:
            log.warning(
                "cannot publish NodeResourceTopology %s: %s. Install the CRD (kubectl apply -k "
                "manifests/components/noderesourcetopology-crd, or NFD's); node labels are "
                "unaffected. Asking again in %.0fs, backing off to 10 min",
                self._name,
                exc,
                delay,
            )
            self._crd_logged = True
        else:
            log.debug("still no %s; asking again in %.0fs", CRD_NAME, delay)
        self._parked_until = self._next_recheck = self._clock() + delay
        self._due.clear()  # pokes cannot help until the CRD is there
