"""Which DRA ResourceClaimTemplates Topoplace has made, for the webhook's DRA fallback.

The claim-templates command creates `topoplace-<policy>-<N>gpu` in each namespace a DRA
policy allows, within seconds of the namespace appearing. A pod created in that moment would
reference a template that is not there yet; with this cache the engine sees that
(`EngineSettings.claim_templates`) and puts the pod on the device-plugin path with a
warning instead (or denies it, `onMissing: deny`).

List then watch, only templates labelled managed-by Topoplace, names kept and nothing else.
Admission never waits: `lookup` answers None ("cannot tell", so the engine trusts the
reconciler) until the first list is in. Watched as common/kube/listwatch.py watches: resumed
from the last resourceVersion, relisted on 410 Gone, backing off on failures.
"""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path
from typing import Any

from common.backoff import Backoff, Sleep
from common.kube.listwatch import ListWatch, Snapshot
from common.kube_config import follow_when_ready

__all__ = ["MANAGED_SELECTOR", "ClaimTemplateStore"]

logger = logging.getLogger(__name__)

# The label the claim-templates command puts on its templates (webhook/claims/templates.py;
# the server may not import that room, so tests/webhook/server checks the two agree).
MANAGED_SELECTOR = "app.kubernetes.io/managed-by=topoplace"


class ClaimTemplateStore:
    def __init__(self, *, backoff: Backoff | None = None, sleep: Sleep = asyncio.sleep) -> None:
        self.ready = False
        self.names: frozenset[tuple[str, str]] = frozenset()
        # Bumped whenever `lookup` could answer differently (admission caches compare it).
        self.generation = 0
        self._backoff = backoff or Backoff()
        self._sleep = sleep

    def lookup(self, namespace: str, name: str) -> bool | None:
        """Whether template `name` is in `namespace`; None before the first list."""
        if not self.ready:
            return None
        return (namespace, name) in self.names

    async def run(self, kubeconfig: Path | None = None) -> None:
        """List and watch until cancelled."""
        await follow_when_ready(
            kubeconfig,
            self.follow,
            api="ResourceV1Api",
            what="template cache",
            sleep=self._sleep,
            next_delay=self._backoff.next_delay,
        )

    async def follow(self, resource: Any) -> None:
        await ListWatch(
            resource.list_resource_claim_template_for_all_namespaces,
            what="template cache",
            params={"label_selector": MANAGED_SELECTOR},
            on_list=self._listed,
            on_event=self._changed,
            backoff=self._backoff,
            sleep=self._sleep,
            log=logger,
        ).run()

    def _listed(self, snapshot: Snapshot) -> None:
        self._set(frozenset(_key(item) for item in snapshot.items))
        if not self.ready:
            self.ready = True
            self.generation += 1

    def _set(self, names: frozenset[tuple[str, str]]) -> None:
        if names != self.names:
            self.names = names
            self.generation += 1

    def _changed(self, kind: str, obj: dict[str, Any]) -> None:
        if kind == "DELETED":
            self._set(self.names - {_key(obj)})
        else:
            self._set(self.names | {_key(obj)})


def _key(obj: dict[str, Any]) -> tuple[str, str]:
    meta = obj.get("metadata") or {}
    return str(meta.get("namespace") or ""), str(meta.get("name") or "")
