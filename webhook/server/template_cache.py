"""Which DRA ResourceClaimTemplates Topoplace has made, for the webhook's DRA fallback.

The claim-templates command creates `topoplace-<policy>-<N>gpu` in each namespace a DRA
policy allows, within seconds of the namespace appearing. A pod created in that moment would
reference a template that is not there yet; with this cache the engine sees that
(`EngineSettings.claim_templates`) and puts the pod on the device-plugin path with a
warning instead (or denies it, `onMissing: deny`).

List then watch, only templates labelled managed-by Topoplace, names kept and nothing else.
Admission never waits: `lookup` answers None ("cannot tell", so the engine trusts the
reconciler) until the first list is in. A watch that ends is resumed from the last
resourceVersion; 410 Gone or any failure relists after a capped, jittered backoff.
"""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path
from typing import Any

from common.backoff import Backoff, Sleep
from webhook import jsonio
from webhook.kube_read import ApiError, list_all, read_json

__all__ = ["MANAGED_SELECTOR", "TemplateCache"]

logger = logging.getLogger(__name__)

# The label the claim-templates command puts on its templates (webhook/claims/templates.py;
# the server may not import that room, so tests/webhook/server checks the two agree).
MANAGED_SELECTOR = "app.kubernetes.io/managed-by=topoplace"
_WATCH_SECONDS = 290


class TemplateCache:
    def __init__(self, *, backoff: Backoff | None = None, sleep: Sleep = asyncio.sleep) -> None:
        self.ready = False
        self.names: frozenset[tuple[str, str]] = frozenset()
        self.resource_version = ""
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
        from kubernetes_asyncio import client

        from common.kube_config import load_configuration_until_ready

        cfg = await load_configuration_until_ready(
            kubeconfig,
            what="template cache",
            sleep=self._sleep,
            next_delay=self._backoff.next_delay,
        )
        async with client.ApiClient(cfg) as api:
            await self.follow(client.ResourceV1Api(api))

    async def follow(self, resource: Any) -> None:
        import aiohttp

        while True:
            try:
                if not self.resource_version:
                    await self._list(resource)
                await self._watch(resource)
                self._backoff.reset()
            except (ApiError, aiohttp.ClientError, TimeoutError, ValueError) as exc:
                self.resource_version = ""  # relist: never trust a gap
                delay = self._backoff.next_delay(
                    retry_after=exc.retry_after if isinstance(exc, ApiError) else None
                )
                logger.warning(
                    "template cache: list/watch failed; retrying",
                    extra={"error": str(exc) or type(exc).__name__, "retry_in_s": round(delay, 2)},
                )
                await self._sleep(delay)

    async def _list(self, resource: Any) -> None:
        items, version = await list_all(
            resource.list_resource_claim_template_for_all_namespaces,
            label_selector=MANAGED_SELECTOR,
        )
        self._set(frozenset(_key(item) for item in items))
        self.resource_version = version
        if not self.ready:
            self.ready = True
            self.generation += 1

    async def _watch(self, resource: Any) -> None:
        response = await resource.list_resource_claim_template_for_all_namespaces(
            watch=True,
            label_selector=MANAGED_SELECTOR,
            resource_version=self.resource_version,
            allow_watch_bookmarks=True,
            timeout_seconds=_WATCH_SECONDS,
            _preload_content=False,
            _request_timeout=_WATCH_SECONDS + 60,
        )
        if response.status != 200:
            await read_json(response)  # raises ApiError with the server's message
        try:
            async for line in response.content:
                if line.strip():
                    self._apply(jsonio.loads(line))
        finally:
            response.release()

    def _set(self, names: frozenset[tuple[str, str]]) -> None:
        if names != self.names:
            self.names = names
            self.generation += 1

    def _apply(self, event: dict[str, Any]) -> None:
        kind, obj = event.get("type"), event.get("object") or {}
        if kind == "ERROR":
            raise ApiError(int(obj.get("code") or 0), str(obj.get("message") or "watch error"))
        if kind in ("ADDED", "MODIFIED"):
            self._set(self.names | {_key(obj)})
        elif kind == "DELETED":
            self._set(self.names - {_key(obj)})
        elif kind != "BOOKMARK":
            raise ValueError(f"unknown watch event type {kind!r}")
        version = (obj.get("metadata") or {}).get("resourceVersion")
        if version:
            self.resource_version = str(version)


def _key(obj: dict[str, Any]) -> tuple[str, str]:
    meta = obj.get("metadata") or {}
    return str(meta.get("namespace") or ""), str(meta.get("name") or "")
