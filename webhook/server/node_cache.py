"""The webhook's view of every node (labels, allocatable, taints), for the fit warnings: no
node fits, kubelets that would refuse the pod, GPU↔NIC pairs not guaranteed.

List then watch, resume, relist on 410 Gone and back off as common/kube/listwatch.py does;
a node the cache cannot read relists after a backoff. Admission never waits for it:
`check` answers from what is there and says nothing until the first list is in.
Only a NodeView per node is kept (webhook/topology/filters/nodes.py), never whole Node objects.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Protocol

from common.backoff import Backoff, Sleep
from common.kube.listwatch import WATCH_SECONDS, ListWatch, Snapshot
from webhook import jsonio
from webhook.explain.checks import plan_for
from webhook.explain.index import NodeIndex
from webhook.policy.model import PlacementPolicy
from webhook.topology.filters.nodes import NodeError, NodeView
from webhook.topology.zones import NodeZones
from webhook.vocabulary import APPLIED_ANNOTATION
from webhook.warnings.facts import IndexFacts
from webhook.warnings.kinds import Fitted
from webhook.warnings.placement import node_warnings

__all__ = ["WATCH_SECONDS", "NodeCache", "Stale", "Zones"]

logger = logging.getLogger(__name__)

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


class Stale(Protocol):
    """The extender's ledger (webhook/scheduler/accounting.py): why a node's object is out
    of date, and a count that moves whenever one more or one less is."""

    def stale(self, node: str) -> str | None: ...

    def stale_count(self) -> int: ...


class NodeCache:
    def __init__(
        self,
        *,
        watch_seconds: int = WATCH_SECONDS,
        backoff: Backoff | None = None,
        sleep: Sleep = asyncio.sleep,
        zones: Zones | None = None,
        stale: Stale | None = None,
    ) -> None:
        self.index = NodeIndex()
        self._zones = zones
        self._stale = stale
        self.ready = False  # the first list is in
        self.listed = asyncio.Event()  # set with `ready`: the server's gc.freeze() waits on it
        self.lists = 0  # lists completed (tests wait on relists)
        self.events = 0  # watch events applied
        self._watch_seconds = watch_seconds
        self._backoff = backoff or Backoff()
        self._sleep = sleep
        # pod signature -> (index, its generation and the zones', the answer then)
        self._answers: dict[bytes, tuple[NodeIndex, tuple[int, int, int], tuple[Fitted, ...]]] = {}

    # --- admission side: never waits, never raises ----------------------------------------
    def stamp(self) -> tuple[bool, NodeIndex, int]:
        """Changes whenever `check` could answer differently: the first list, a relist (a
        new index), a node event that moved a verdict (the index's generation)."""
        index = self.index
        return (self.ready, index, index.generation)

    def check(self, pod: Mapping[str, Any], policy: PlacementPolicy | None) -> list[Fitted]:
        """The node warnings for a mutated pod, fitted (webhook/warnings decides which): none
        when it fits somewhere with the pairs it asks for, the cache is cold or no policy
        applied."""
        if not self.ready or policy is None:
            return []
        index = self.index
        zones = self._zones
        stale = self._stale
        generation = (
            index.generation,
            zones.generation if zones is not None else 0,
            stale.stale_count() if stale is not None else 0,
        )
        key = _signature(pod)
        known = self._answers.get(key)
        if known is not None and known[0] is index and known[1] == generation:
            return list(known[2])  # the pods of one Job are alike: judged once per node change
        zones_of = zones.get if zones is not None else None
        stale_of = stale.stale if stale is not None else None
        facts = IndexFacts(index, plan_for(pod, policy), policy, zones_of, stale_of)
        warnings = tuple(node_warnings(facts))
        if len(self._answers) >= _ANSWERS_MAX:
            self._answers.clear()
        self._answers[key] = (index, generation, warnings)
        return list(warnings)

    def labels(self) -> dict[str, Mapping[str, str]] | None:
        """Every node's labels by name; None until the first list is in."""
        if not self.ready:
            return None
        return {view.name: view.labels for view in self.index.views()}

    def carries(self, key: str) -> bool | None:
        """Whether some node carries label `key`; None until the first list is in."""
        if not self.ready:
            return None
        return any(key in view.labels for view in self.index.views())

    # --- the list+watch loop -------------------------------------------------------------
    async def run(self, kubeconfig: Path | None = None) -> None:
        """List and watch until cancelled. Configuration problems are retried too: the
        webhook keeps serving admission without the warning meanwhile."""
        from kubernetes_asyncio import client

        from common.kube_config import api_client_until_ready

        async with api_client_until_ready(
            kubeconfig, what="node cache", sleep=self._sleep, next_delay=self._backoff.next_delay
        ) as api:
            await self.follow(client.CoreV1Api(api))

    async def follow(self, core: Any) -> None:
        await ListWatch(
            core.list_node,
            what="node cache",
            on_list=self._listed,
            on_event=self._changed,
            backoff=self._backoff,
            sleep=self._sleep,
            watch_seconds=self._watch_seconds,
            handler_errors=(NodeError,),
            log=logger,
        ).run()

    def _listed(self, snapshot: Snapshot) -> None:
        # Built aside and swapped in whole: admission never sees a half-built index.
        self.index = NodeIndex(NodeView.from_object(item) for item in snapshot.items)
        self.ready = True
        self.listed.set()
        self.lists += 1
        logger.info(
            "node cache: listed nodes",
            extra={"nodes": len(snapshot.items), "rv": snapshot.resource_version},
        )

    def _changed(self, kind: str, obj: dict[str, Any]) -> None:
        if kind == "DELETED":
            self.index.remove(str((obj.get("metadata") or {}).get("name")))
        else:
            self.index.upsert(NodeView.from_object(obj))
        self.events += 1
