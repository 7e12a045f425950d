"""The webhook's store of every node (labels, allocatable, taints): a plain store, read by the
placement warnings (webhook/warnings/placement.py), the workload path and the spans.

List then watch, resume, relist on 410 Gone and back off as common/kube/listwatch.py does;
a node the store cannot read relists after a backoff. Admission never waits for it: readers
answer from what is there, and say nothing until the first list is in (`ready`).
Only a NodeView per node is kept (webhook/placement_model/filters/nodes.py), never whole Node
objects, in a bit-mask index (webhook/nodefit/node_index.py).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from common.backoff import Backoff, Sleep
from common.kube.listwatch import WATCH_SECONDS, ListWatch, Snapshot
from common.kube_config import follow_when_ready
from webhook.nodefit.node_index import NodeIndex
from webhook.placement_model.filters.nodes import NodeError, NodeView

__all__ = ["WATCH_SECONDS", "NodeStore"]

logger = logging.getLogger(__name__)


class NodeStore:
    """Every node, as `serve --node-cache` keeps it."""

    def __init__(
        self,
        *,
        watch_seconds: int = WATCH_SECONDS,
        backoff: Backoff | None = None,
        sleep: Sleep = asyncio.sleep,
    ) -> None:
        self.index = NodeIndex()
        self.ready = False  # the first list is in
        self.listed = asyncio.Event()  # set with `ready`: the server's gc.freeze() waits on it
        self.lists = 0  # lists completed (tests wait on relists)
        self.events = 0  # watch events applied
        self._watch_seconds = watch_seconds
        self._backoff = backoff or Backoff()
        self._sleep = sleep

    # --- read side: never waits, never raises ----------------------------------------
    def stamp(self) -> tuple[bool, NodeIndex, int]:
        """Changes whenever a reader could answer differently: the first list, a relist (a
        new index), a node event that moved a verdict (the index's generation)."""
        index = self.index
        return (self.ready, index, index.generation)

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
        await follow_when_ready(
            kubeconfig,
            self.follow,
            api="CoreV1Api",
            what="node cache",
            sleep=self._sleep,
            next_delay=self._backoff.next_delay,
        )

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
