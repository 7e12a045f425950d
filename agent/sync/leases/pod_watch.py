"""Leases for every pod on this node that mounts a cached dataset version.

Watches the node's own pods (`fieldSelector=spec.nodeName=<node>`) with common/kube/listwatch.py:
a list, then a watch from the list's resourceVersion, resumed when it drops or fails, and a
fresh list when it expires (410), when a lease write failed, and once per watch timeout.
- A pod that has not finished leases every version it mounts through the cache hostPath
  (`subPath: <name>/<version>`, or a hostPath pointing into the cache), prefetch or not.
- A pod that finished (Succeeded/Failed) or was deleted loses all its leases.
- After each list, leases of pods the list does not hold are swept: those a SIGKILLed
  prefetch left, or of pods deleted while the agent was down. A lease written after the list
  was asked for is kept: its pod may be too new for the list.
The leases themselves (format, guard, race with eviction) are `agent.cache.lease`.
`on_event` hears every pod event and list (the NodeResourceTopology publisher's trigger: a pod
started, changed or went); with `lease=False` the watch runs for it alone.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path, PurePosixPath
from typing import Any

from kubernetes_asyncio import client

from agent.cache.lease import drop, lease_and_check, release, sweep
from common.backoff import Backoff, BackoffPolicy, Sleep, sleep_until_set
from common.cache_layout import LEASE_DIR, TEMP_PREFIX
from common.kube.listwatch import ListWatch, Snapshot

__all__ = ["PodLeases", "mounted_versions"]

log = logging.getLogger(__name__)

Version = tuple[str, str]
_FINISHED = ("Succeeded", "Failed")
# Server-side watch timeout: a relist (and a sweep) at least this often.
_WATCH_SECONDS = 300


def _plain(part: str) -> bool:
    return bool(part) and not part.startswith((".", TEMP_PREFIX)) and part != ".."


def _mounts(spec: Mapping[str, Any]) -> Iterator[Mapping[str, Any]]:
    for key in ("initContainers", "containers"):
        for container in spec.get(key) or []:
            yield from container.get("volumeMounts") or []


def mounted_versions(pod: Mapping[str, Any], host_root: PurePosixPath) -> set[Version]:
    """(name, version) pairs the pod mounts from the cache at `host_root` (pure)."""
    spec = pod.get("spec") or {}
    host_paths = {
        v.get("name"): PurePosixPath(v["hostPath"]["path"])
        for v in spec.get("volumes") or []
        if isinstance(v.get("hostPath"), Mapping) and v["hostPath"].get("path")
    }
    found: set[Version] = set()
    for mount in _mounts(spec):
        base = host_paths.get(mount.get("name"))
        if base is None:
            continue
        path = base / (mount.get("subPath") or "")
        try:
            parts = path.relative_to(host_root).parts
        except ValueError:
            continue
        if len(parts) >= 2 and _plain(parts[0]) and _plain(parts[1]):
            found.add((parts[0], parts[1]))
    return found


class PodLeases:
    """Keeps the cache's leases equal to what the node's pods mount; `run(stop)`."""

    def __init__(
        self,
        api: client.ApiClient,
        *,
        node_name: str,
        cache_root: Path,
        host_root: PurePosixPath | None = None,
        sleep: Sleep = asyncio.sleep,
        backoff: Backoff | None = None,
        watch_seconds: int = _WATCH_SECONDS,
        on_event: Callable[[], None] = lambda: None,
        on_pod: Callable[[Mapping[str, Any]], None] = lambda _: None,
        lease: bool = True,
    ) -> None:
        self._core = client.CoreV1Api(api)
        self._selector = f"spec.nodeName={node_name}"
        self._root = cache_root
        self._host_root = host_root or PurePosixPath(cache_root)
        self._sleep = sleep
        self._backoff = backoff or Backoff(BackoffPolicy(initial=1.0, cap=30.0))
        self._watch_seconds = watch_seconds
        self._on_event = on_event
        self._on_pod = on_pod  # every pod listed or changed (the kubelet-refusal count)
        self._lease = lease
        self._held: dict[str, set[Version]] = {}  # uid -> versions this agent leased
        self.lists = 0  # completed list-and-sweep passes, for tests and logs

    def _writable(self) -> bool:
        base = self._root / LEASE_DIR
        with contextlib.suppress(OSError):  # prepare-cache makes it; an older cache lacks it
            base.mkdir(exist_ok=True)
        return os.access(base, os.W_OK)

    async def run(self, stop: asyncio.Event) -> None:
        while self._lease and not stop.is_set() and not await asyncio.to_thread(self._writable):
            log.warning(
                "dataset leases are off until %s is writable: a version in use is protected "
                "only by its prefetch's lease",
                self._root / LEASE_DIR,
            )
            await sleep_until_set(self._sleep, 60, stop)
            if stop.is_set():
                return
        pods = ListWatch(
            self._core.list_pod_for_all_namespaces,
            what="pod watch",
            params={"field_selector": self._selector},
            on_list=self._listed,
            on_event=self._changed,
            backoff=self._backoff,
            sleep=self._sleep,
            watch_seconds=self._watch_seconds,
            # Each list sweeps the leases of pods it no longer holds: one per watch at least.
            relist_after=self._watch_seconds,
            handler_errors=(OSError,),
            log=log,
        )
        await _stopped(stop, pods.run())

    async def _listed(self, snapshot: Snapshot) -> None:
        live: set[str] = set()
        for pod in snapshot.items:
            if await self._apply("ADDED", pod):
                live.add(pod["metadata"]["uid"])
        for uid in set(self._held) - live:
            self._held.pop(uid, None)
        removed = (
            await asyncio.to_thread(sweep, self._root, live, listed_at=snapshot.asked_at)
            if self._lease
            else []
        )
        self.lists += 1
        self._on_event()
        log.debug("pod leases synced", extra={"pods": len(live), "swept": len(removed)})

    async def _changed(self, kind: str, pod: dict[str, Any]) -> None:
        await self._apply(kind, pod)
        self._on_event()

    async def _apply(self, kind: str, pod: Mapping[str, Any]) -> bool:
        """Bring one pod's leases up to date; True while the pod still runs here."""
        uid = str((pod.get("metadata") or {}).get("uid") or "")
        if not uid:
            return False
        self._on_pod(pod)
        phase = (pod.get("status") or {}).get("phase")
        if not self._lease:
            return kind != "DELETED" and phase not in _FINISHED
        if kind == "DELETED" or phase in _FINISHED:
            self._held.pop(uid, None)
            if await asyncio.to_thread(drop, self._root, uid):
                log.info("dropped the dataset leases of finished pod %s", uid)
            return False
        wanted = mounted_versions(pod, self._host_root)
        held = self._held.get(uid, set())
        for name, version in sorted(wanted - held):
            await asyncio.to_thread(lease_and_check, self._root, name, version, uid, writer="agent")
        for name, version in sorted(held - wanted):
            await asyncio.to_thread(release, self._root, name, version, uid)
        self._held[uid] = wanted
        return True


async def _stopped(stop: asyncio.Event, work: Any) -> bool:
    """Run `work` until it ends or `stop` is set; True when stopped."""
    task = asyncio.ensure_future(work)
    stopper = asyncio.ensure_future(stop.wait())
    try:
        await asyncio.wait({task, stopper}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        stopper.cancel()
        if not task.done():
            task.cancel()
        await asyncio.gather(stopper, return_exceptions=True)
    if task.done() and not task.cancelled() and task.exception() is not None:
        raise task.exception()
    return stop.is_set()
