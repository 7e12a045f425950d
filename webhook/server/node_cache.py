"""The webhook's view of every node (labels, allocatable, taints), for the fit warnings: no
node fits, kubelets that would refuse the pod, GPU↔NIC pairs not guaranteed.

List then watch from the list's resourceVersion (with bookmarks), through kubernetes-asyncio
reading raw JSON; a watch that ends is resumed from the last resourceVersion seen, a 410
Gone (the version was compacted away) relists, any other failure retries with capped,
jittered backoff (common/backoff.py, Retry-After honoured). Admission never waits for it:
`check` answers from what is there and says nothing until the first list is in.
Only a NodeView per node is kept (webhook/explain/nodes.py), never whole Node objects.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Protocol

from common.backoff import Backoff, Sleep
from webhook import jsonio
from webhook.explain.checks import plan_for
from webhook.explain.index import NodeIndex
from webhook.explain.nodes import NodeError, NodeView
from webhook.kube_read import ApiError, list_all, watch_events
from webhook.policy.model import PlacementPolicy
from webhook.topology.zones import NodeZones
from webhook.vocabulary import APPLIED_ANNOTATION
from webhook.warnings.facts import IndexFacts
from webhook.warnings.placement import node_warnings

__all__ = ["WATCH_SECONDS", "NodeCache", "Zones"]

logger = logging.getLogger(__name__)

WATCH_SECONDS = 290  # the API server ends a watch after this; we resume from where it was


_ANSWERS_MAX = 1024
# What a verdict depends on in a mutated pod; the applied annotation names policy and content.
_SPEC_KEYS = ("affinity", "nodeSelector", "tolerations", "nodeName", "overhead", "resources")


def _signature(pod: Mapping[str, Any]) -> bytes:
    spec = pod.get("spec") or {}
    annotations = (pod.get("metadata") or {}).get("annotations") or {}
    containers = [
        (c.get("resources"), c.get("restartPolicy"))
        for key in ("initContainers", "containers")
        for c in spec.get(key) or ()
    ]
    return jsonio.dumps(
        [annotations.get(APPLIED_ANNOTATION), [spec.get(k) for k in _SPEC_KEYS], containers]
    )


class Zones(Protocol):
    """Free capacity per NUMA node (webhook/scheduler/nrt_cache.py)."""

    generation: int

    def get(self, node: str) -> NodeZones | None: ...


class _Expired(Exception):
    """410 Gone: the resourceVersion is too old to watch from; list again."""


class NodeCache:
    def __init__(
        self,
        *,
        watch_seconds: int = WATCH_SECONDS,
        backoff: Backoff | None = None,
        sleep: Sleep = asyncio.sleep,
        zones: Zones | None = None,
    ) -> None:
        self.index = NodeIndex()
        self._zones = zones
        self.ready = False  # the first list is in
        self.resource_version = ""
        self.lists = 0  # lists completed (tests wait on relists)
        self.events = 0  # watch events applied
        self._watch_seconds = watch_seconds
        self._backoff = backoff or Backoff()
        self._sleep = sleep
        self._fresh = False  # listed, and no watch event since
        # pod signature -> (index, its generation and the zones', the answer then)
        self._answers: dict[bytes, tuple[NodeIndex, tuple[int, int], tuple[str, ...]]] = {}

    # --- admission side: never waits, never raises ----------------------------------------
    def stamp(self) -> tuple[bool, NodeIndex, int]:
        """Changes whenever `check` could answer differently: the first list, a relist (a
        new index), a node event that moved a verdict (the index's generation)."""
        index = self.index
        return (self.ready, index, index.generation)

    def check(self, pod: Mapping[str, Any], policy: PlacementPolicy | None) -> list[str]:
        """The node warnings for a mutated pod, fitted (webhook/warnings decides which): none
        when it fits somewhere with the pairs it asks for, the cache is cold or no policy
        applied."""
        if not self.ready or policy is None:
            return []
        index = self.index
        zones = self._zones
        generation = (index.generation, zones.generation if zones is not None else 0)
        key = _signature(pod)
        known = self._answers.get(key)
        if known is not None and known[0] is index and known[1] == generation:
            return list(known[2])  # the pods of one Job are alike: judged once per node change
        zones_of = zones.get if zones is not None else None
        facts = IndexFacts(index, plan_for(pod, policy), policy, zones_of)
        warnings = tuple(node_warnings(facts))
        if len(self._answers) >= _ANSWERS_MAX:
            self._answers.clear()
        self._answers[key] = (index, generation, warnings)
        return list(warnings)

    # --- the list+watch loop -------------------------------------------------------------
    async def run(self, kubeconfig: Path | None = None) -> None:
        """List and watch until cancelled. Configuration problems are retried too: the
        webhook keeps serving admission without the warning meanwhile."""
        from kubernetes_asyncio import client

        from common.kube_config import load_configuration_until_ready

        cfg = await load_configuration_until_ready(
            kubeconfig, what="node cache", sleep=self._sleep, next_delay=self._backoff.next_delay
        )
        async with client.ApiClient(cfg) as api:
            await self.follow(client.CoreV1Api(api))

    async def follow(self, core: Any) -> None:
        import aiohttp

        while True:
            try:
                if not self.resource_version:
                    await self._list(core)
                await self._watch(core)
                self._backoff.reset()
            except _Expired:
                logger.info("node cache: watch expired (410); listing again")
                self.resource_version = ""
                if self._fresh:  # expired straight after a list: do not spin on it
                    await self._sleep(self._backoff.next_delay())
            except (ApiError, aiohttp.ClientError, TimeoutError, ValueError, NodeError) as exc:
                retry_after = exc.retry_after if isinstance(exc, ApiError) else None
                if isinstance(exc, ApiError) and exc.status == 410:
                    self.resource_version = ""
                delay = self._backoff.next_delay(retry_after=retry_after)
                logger.warning(
                    "node cache: list/watch failed; retrying",
                    extra={"error": str(exc) or type(exc).__name__, "retry_in_s": round(delay, 2)},
                )
                await self._sleep(delay)

    async def _list(self, core: Any) -> None:
        items, version = await list_all(core.list_node)
        # Built aside and swapped in whole: admission never sees a half-built index.
        self.index = NodeIndex(NodeView.from_object(item) for item in items)
        self.resource_version = version
        self.ready = True
        self._fresh = True
        self.lists += 1
        logger.info("node cache: listed nodes", extra={"nodes": len(items), "rv": version})

    async def _watch(self, core: Any) -> None:
        response = await core.list_node(
            watch=True,
            resource_version=self.resource_version,
            allow_watch_bookmarks=True,
            timeout_seconds=self._watch_seconds,
            _preload_content=False,
            # The server ends the watch first; this only bounds a stream gone silent.
            _request_timeout=self._watch_seconds + 60,
        )
        async for event in watch_events(response):
            self._apply(event)

    def _apply(self, event: Mapping[str, Any]) -> None:
        kind = event.get("type")
        obj = event.get("object") or {}
        if kind == "ERROR":
            if obj.get("code") == 410:
                raise _Expired
            raise ApiError(int(obj.get("code") or 0), str(obj.get("message") or "watch error"))
        version = (obj.get("metadata") or {}).get("resourceVersion")
        if kind in ("ADDED", "MODIFIED"):
            self.index.upsert(NodeView.from_object(obj))
        elif kind == "DELETED":
            self.index.remove(str((obj.get("metadata") or {}).get("name")))
        elif kind != "BOOKMARK":
            raise ValueError(f"unknown watch event type {kind!r}")
        if version:
            self.resource_version = str(version)
        self._fresh = False
        self.events += 1
