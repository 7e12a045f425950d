"""Every node's NodeResourceTopology, kept from a list+watch, for the extender, `explain`
and the admission warning.

List then watch from the list's resourceVersion; a watch that ends resumes from the last
resourceVersion seen, 410 Gone or any failure relists after a capped, jittered backoff. The
CRD absent (404: neither NFD nor Topoplace's component installed) is logged once and retried
at the backoff's cap: nothing reads free capacity meanwhile, and everything behaves as
without the objects. A malformed object is logged and left out. Only `NodeZones` are kept.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from common.backoff import Backoff, Sleep
from common.node_resource_topology import GROUP, PLURAL, VERSION
from webhook.kube_read import ApiError, list_all, watch_events
from webhook.topology.zones import (
    NodeZones,
    ZoneError,
    zones_from_object,
)

__all__ = ["ABSENT_RECHECK_S", "NrtCache"]

logger = logging.getLogger(__name__)

_WATCH_SECONDS = 290
ABSENT_RECHECK_S = 60.0  # the CRD may be installed later (NFD, or our component)
_RESOURCE = {"group": GROUP, "version": VERSION, "plural": PLURAL}


class NrtCache:
    def __init__(self, *, backoff: Backoff | None = None, sleep: Sleep = asyncio.sleep) -> None:
        self.zones: dict[str, NodeZones] = {}
        self.ready = False
        self.generation = 0  # bumped on every change: cached verdicts compare it
        self.resource_version = ""
        self._backoff = backoff or Backoff()
        self._sleep = sleep
        self._said_absent = False

    def get(self, node: str) -> NodeZones | None:
        return self.zones.get(node)

    async def run(self, kubeconfig: Path | None = None) -> None:
        """List and watch until cancelled."""
        from kubernetes_asyncio import client

        from common.kube_config import load_configuration_until_ready

        cfg = await load_configuration_until_ready(
            kubeconfig,
            what="NodeResourceTopology cache",
            sleep=self._sleep,
            next_delay=self._backoff.next_delay,
        )
        async with client.ApiClient(cfg) as api:
            await self.follow(client.CustomObjectsApi(api))

    async def follow(self, custom: Any) -> None:
        import aiohttp

        while True:
            try:
                if not self.resource_version:
                    await self._list(custom)
                await self._watch(custom)
                self._backoff.reset()
            except (ApiError, aiohttp.ClientError, TimeoutError, ValueError) as exc:
                self.resource_version = ""  # relist: never trust a gap
                if isinstance(exc, ApiError) and exc.status == 404:
                    await self._absent()
                    continue
                delay = self._backoff.next_delay(
                    retry_after=exc.retry_after if isinstance(exc, ApiError) else None
                )
                logger.warning(
                    "NodeResourceTopology cache: list/watch failed; retrying",
                    extra={"error": str(exc) or type(exc).__name__, "retry_in_s": round(delay, 2)},
                )
                await self._sleep(delay)

    async def _absent(self) -> None:
        if not self._said_absent:
            logger.warning(
                "NodeResourceTopology CRD not installed (topology.node.k8s.io/v1alpha2): free "
                "capacity per NUMA node unknown; checking again every minute"
            )
            self._said_absent = True
        if self.zones:
            self.zones = {}
            self.generation += 1
        await self._sleep(ABSENT_RECHECK_S)

    async def _list(self, custom: Any) -> None:
        items, version = await list_all(custom.list_cluster_custom_object, **_RESOURCE)
        zones = {}
        for item in items:
            parsed = _parse(item)
            if parsed is not None:
                zones[parsed.node] = parsed
        self.zones = zones  # swapped in whole
        self.resource_version = version
        self.ready = True
        self.generation += 1
        if self._said_absent:
            logger.info("NodeResourceTopology CRD found", extra={"objects": len(zones)})
            self._said_absent = False

    async def _watch(self, custom: Any) -> None:
        response = await custom.list_cluster_custom_object(
            **_RESOURCE,
            watch=True,
            resource_version=self.resource_version,
            allow_watch_bookmarks=True,
            timeout_seconds=_WATCH_SECONDS,
            _preload_content=False,
            _request_timeout=_WATCH_SECONDS + 60,
        )
        async for event in watch_events(response):
            self.apply(event)

    def apply(self, event: Mapping[str, Any]) -> None:
        """One watch event."""
        kind, obj = event.get("type"), event.get("object") or {}
        if kind == "ERROR":
            raise ApiError(int(obj.get("code") or 0), str(obj.get("message") or "watch error"))
        name = str((obj.get("metadata") or {}).get("name") or "")
        if kind in ("ADDED", "MODIFIED"):
            # In place: readers share this event loop, so none sees a half-made change.
            parsed = _parse(obj)
            if parsed is None:
                self.zones.pop(name, None)
            else:
                self.zones[name] = parsed
            self.generation += 1
        elif kind == "DELETED":
            self.zones.pop(name, None)
            self.generation += 1
        elif kind != "BOOKMARK":
            raise ValueError(f"unknown watch event type {kind!r}")
        version = (obj.get("metadata") or {}).get("resourceVersion")
        if version:
            self.resource_version = str(version)


def _parse(obj: Mapping[str, Any]) -> NodeZones | None:
    try:
        return zones_from_object(obj)
    except ZoneError as exc:
        logger.warning("NodeResourceTopology skipped", extra={"error": str(exc)})
        return None
