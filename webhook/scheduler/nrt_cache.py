"""Every node's NodeResourceTopology, kept from a list+watch, for the extender, `explain`
and the admission warning.

List, watch, resume, relist on 410 Gone and back off as common/kube/listwatch.py does. The
CRD absent (404: neither NFD nor Topoplace's component installed) is logged once and retried
at the backoff's cap: nothing reads free capacity meanwhile, and everything behaves as
without the objects. A malformed object is logged and left out. Only `NodeZones` are kept,
and nodes whose zones hold the same counts share one zones tuple: a fleet of a few machine
classes keeps a few hundred zone records, not one per node, and the extender judges each
shared tuple once (webhook/scheduler/extender.py).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Hashable, Mapping
from pathlib import Path
from typing import Any

from common.backoff import Backoff, Sleep
from common.kube.listwatch import ListWatch, Snapshot
from common.kube_config import follow_when_ready
from common.node_resource_topology import GROUP, PLURAL, VERSION
from webhook.kube_read import ApiError
from webhook.placement_model.zones import (
    NodeZones,
    Zone,
    ZoneError,
    shared,
    zones_from_object,
)

__all__ = ["ABSENT_RECHECK_S", "NrtCache"]

logger = logging.getLogger(__name__)

ABSENT_RECHECK_S = 60.0  # the CRD may be installed later (NFD, or our component)
_RESOURCE = {"group": GROUP, "version": VERSION, "plural": PLURAL}


OnChange = Callable[[str, NodeZones | None, NodeZones | None], None]


class NrtCache:
    def __init__(
        self,
        *,
        backoff: Backoff | None = None,
        sleep: Sleep = asyncio.sleep,
        on_change: OnChange | None = None,
    ) -> None:
        self.zones: dict[str, NodeZones] = {}
        # node -> its zones' class (the shared tuple's id, policy, scope), kept with `zones`:
        # the extender's hot loop reads one prebuilt key per node (extender._verdicts)
        self.classes: dict[str, Hashable] = {}
        # (node, before, after) for every listed, changed or deleted object: the ledger
        self.on_change = on_change
        self.ready = False
        self.generation = 0  # bumped on every change: cached verdicts compare it
        self._backoff = backoff or Backoff()
        self._sleep = sleep
        self._said_absent = False
        # zones' counts -> the one tuple alike nodes share (cleared when it outgrows the nodes)
        self._shared: dict[Hashable, tuple[Zone, ...]] = {}

    def get(self, node: str) -> NodeZones | None:
        return self.zones.get(node)

    async def run(self, kubeconfig: Path | None = None) -> None:
        """List and watch until cancelled."""
        await follow_when_ready(
            kubeconfig,
            self.follow,
            api="CustomObjectsApi",
            what="NodeResourceTopology cache",
            sleep=self._sleep,
            next_delay=self._backoff.next_delay,
        )

    async def follow(self, custom: Any) -> None:
        await ListWatch(
            custom.list_cluster_custom_object,
            what="NodeResourceTopology cache",
            params=_RESOURCE,
            on_list=self._listed,
            on_event=self.apply,
            backoff=self._backoff,
            sleep=self._sleep,
            on_api_error=self._absent,
            log=logger,
        ).run()

    def _absent(self, exc: ApiError) -> float | None:
        """404: the CRD is not installed; said once, checked again every minute."""
        if exc.status != 404:
            return None
        if not self._said_absent:
            logger.warning(
                "NodeResourceTopology CRD not installed (topology.node.k8s.io/v1alpha2): free "
                "capacity per NUMA node unknown; checking again every minute"
            )
            self._said_absent = True
        if self.zones:
            before, self.zones, self.classes = self.zones, {}, {}
            self.generation += 1
            on_change = self.on_change
            if on_change is not None:
                for name, zones in before.items():
                    on_change(name, zones, None)
        return ABSENT_RECHECK_S

    def _listed(self, snapshot: Snapshot) -> None:
        zones = {}
        self._shared = {}
        for item in snapshot.items:
            parsed = self._parse(item)
            if parsed is not None:
                zones[parsed.node] = parsed
        before, self.zones = self.zones, zones  # swapped in whole
        self.classes = {name: _class(z) for name, z in zones.items()}
        if self.on_change is not None:
            for name in before.keys() | zones.keys():
                self.on_change(name, before.get(name), zones.get(name))
        self.ready = True
        self.generation += 1
        logger.info(
            "NodeResourceTopology cache: listed",
            extra={"objects": len(zones), "rv": snapshot.resource_version},
        )
        if self._said_absent:
            logger.info("NodeResourceTopology CRD found", extra={"objects": len(zones)})
            self._said_absent = False

    def apply(self, kind: str, obj: Mapping[str, Any]) -> None:
        """One ADDED, MODIFIED or DELETED object."""
        name = str((obj.get("metadata") or {}).get("name") or "")
        before = self.zones.get(name)
        parsed = None if kind == "DELETED" else self._parse(obj)
        # In place: readers share this event loop, so none sees a half-made change.
        if parsed is None:
            self.zones.pop(name, None)
            self.classes.pop(name, None)
        else:
            self.zones[name] = parsed
            self.classes[name] = _class(parsed)
        self.generation += 1
        if self.on_change is not None:
            self.on_change(name, before, self.zones.get(name))

    def _parse(self, obj: Mapping[str, Any]) -> NodeZones | None:
        try:
            parsed = zones_from_object(obj)
        except ZoneError as exc:
            logger.warning("NodeResourceTopology skipped", extra={"error": str(exc)})
            return None
        if len(self._shared) > 2 * len(self.zones) + 64:  # churn left counts nobody has
            self._shared = {}
        return shared(parsed, self._shared)


def _class(zones: NodeZones) -> Hashable:
    """Alike nodes' key: the shared tuple (held by `zones` as long as the key is), policy and
    scope."""
    return (id(zones.zones), zones.policy, zones.scope)
