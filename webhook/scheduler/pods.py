"""The pods placed on a node, from a list+watch, for the extender's ledger (accounting.py).

Every scheduler's pods count (a pod bound by another scheduler holds NUMA capacity too), so
the watch asks for all pods with a node (`spec.nodeName!=`); terminal ones are asked for too,
since a refusal (phase Failed) frees a predicted share and is counted. Nothing of a pod is
kept unless the kubelet has not admitted it yet. RBAC: pods list, watch (the webhook's
`topoplace-webhook-pods` role, which `--workload-spans` already uses).
"""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path
from typing import Any, Final

from common.backoff import Backoff, Sleep
from common.kube.listwatch import ListWatch, Snapshot
from common.kube_config import follow_when_ready
from webhook.scheduler.accounting import Ledger

__all__ = ["BOUND_SELECTOR", "BoundPods"]

logger = logging.getLogger(__name__)

BOUND_SELECTOR: Final = "spec.nodeName!="


class BoundPods:
    def __init__(
        self, ledger: Ledger, *, backoff: Backoff | None = None, sleep: Sleep = asyncio.sleep
    ) -> None:
        self._ledger = ledger
        self._backoff = backoff or Backoff()
        self._sleep = sleep

    async def run(self, kubeconfig: Path | None = None) -> None:
        """List and watch until cancelled."""
        await follow_when_ready(
            kubeconfig,
            self.follow,
            api="CoreV1Api",
            what="bound pods",
            sleep=self._sleep,
            next_delay=self._backoff.next_delay,
        )

    async def follow(self, core: Any) -> None:
        await ListWatch(
            core.list_pod_for_all_namespaces,
            what="bound pods",
            params={"field_selector": BOUND_SELECTOR},
            on_list=self._listed,
            on_event=self._ledger.pod_event,
            backoff=self._backoff,
            sleep=self._sleep,
            log=logger,
        ).run()

    def _listed(self, snapshot: Snapshot) -> None:
        self._ledger.pods_listed(snapshot.items)
        logger.info(
            "bound pods: listed",
            extra={"pods": len(snapshot.items), "predicted": len(self._ledger.pending_pods())},
        )
