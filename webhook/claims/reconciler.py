"""Keep the DRA ResourceClaimTemplates in the cluster equal to what the policies want.

Level-triggered: any event (a namespace or an owned template added, changed or deleted, a
policy set swapped, or the periodic resync) marks the state dirty, and one pass lists the
namespaces and the templates Topoplace owns, plans (claims/templates.py) and applies the plan.
Events carry no state of their own, so a missed or repeated event costs nothing.

One writer: the command runs as a single-replica Deployment (strategy Recreate). Writes are
still safe if two ever overlap: a create of an existing name answers 409 and is left alone,
and a delete carries the resourceVersion that was planned on (a precondition), so a template
someone changed meanwhile is never deleted on stale information. Only templates with the
managed-by label are listed, so foreign templates are never touched; a foreign template
with one of our names is left in place and logged.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import Callable
from typing import Any

import aiohttp
from kubernetes_asyncio import client
from kubernetes_asyncio.client.exceptions import ApiException

from common.backoff import Backoff, BackoffPolicy, Sleep
from common.kube.errors import describe, retry_after
from common.kube.listwatch import ListWatch
from webhook.claims.templates import MANAGED_SELECTOR, Plan, desired_templates, plan_changes
from webhook.policy.loader import PolicySet

__all__ = ["TemplateReconciler"]

logger = logging.getLogger(__name__)

_ERRORS = (ApiException, aiohttp.ClientError, asyncio.TimeoutError, OSError)
# Server-side watch timeout: the watch is resumed after this.
_WATCH_SECONDS = 300


class TemplateReconciler:
    """`run()` until cancelled; `poke()` after the policy set changed."""

    def __init__(
        self,
        api: client.ApiClient,
        policies: Callable[[], PolicySet | None],
        *,
        resync_interval: float = 60.0,
        backoff: BackoffPolicy | None = None,
        sleep: Sleep = asyncio.sleep,
    ) -> None:
        self._core = client.CoreV1Api(api)
        self._resource = client.ResourceV1Api(api)
        self._policies = policies
        self._resync = resync_interval
        self._backoff_policy = backoff or BackoffPolicy(initial=0.5, cap=30.0)
        self._sleep = sleep
        self._dirty = asyncio.Event()
        self.passes = 0
        """Passes completed without error (for tests and logs)."""
        self.ready = False
        """The last pass succeeded: the cluster matched the policies then (`/readyz`)."""

    def poke(self) -> None:
        self._dirty.set()

    async def run(self) -> None:
        namespaces = self._watching(self._core.list_namespace, "namespace watch")
        templates = self._watching(
            self._resource.list_resource_claim_template_for_all_namespaces,
            "template watch",
            label_selector=MANAGED_SELECTOR,
        )
        watches = [
            asyncio.create_task(namespaces.run(), name="watch-namespaces"),
            asyncio.create_task(templates.run(), name="watch-templates"),
        ]
        try:
            await self._loop()
        finally:
            for task in watches:
                task.cancel()
            await asyncio.gather(*watches, return_exceptions=True)

    async def _loop(self) -> None:
        backoff = Backoff(self._backoff_policy)
        self._dirty.set()
        while True:
            # The timeout is the periodic resync. (asyncio.timeout, not wait_for: on 3.11
            # wait_for can swallow a cancellation that races the event, and never stop.)
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(self._resync):
                    await self._dirty.wait()
            self._dirty.clear()
            try:
                plan = await self.reconcile_once()
            except _ERRORS as exc:
                self.ready = False
                delay = backoff.next_delay(retry_after=retry_after(getattr(exc, "headers", None)))
                logger.warning(
                    "claim template pass failed; retrying",
                    extra={"error": describe(exc), "retry_in_s": round(delay, 2)},
                )
                await self._sleep(delay)
                self._dirty.set()
                continue
            backoff.reset()
            if plan.delete:
                self._dirty.set()  # stale templates were deleted: create them anew

    async def reconcile_once(self) -> Plan:
        """One pass: list, plan, apply. Returns the plan it applied."""
        policies = self._policies()
        if policies is None:
            return Plan()
        namespaces = await self._namespaces()
        owned = await self._owned()
        plan = plan_changes(desired_templates(policies.values(), namespaces), owned)
        for namespace, name, version in plan.delete:
            await self._delete(namespace, name, version)
        for body in plan.create:
            await self._create(body)
        self.passes += 1
        self.ready = True
        if plan:
            logger.info(
                "claim templates reconciled",
                extra={
                    "templates_created": len(plan.create),
                    "templates_deleted": len(plan.delete),
                },
            )
        return plan

    async def _namespaces(self) -> list[str]:
        listed = await _raw(self._core.list_namespace(_preload_content=False))
        return [
            item["metadata"]["name"]
            for item in listed.get("items") or []
            # A terminating namespace refuses creates; its templates go with it.
            if (item.get("status") or {}).get("phase") != "Terminating"
        ]

    async def _owned(self) -> list[dict[str, Any]]:
        listed = await _raw(
            self._resource.list_resource_claim_template_for_all_namespaces(
                label_selector=MANAGED_SELECTOR, _preload_content=False
            )
        )
        return list(listed.get("items") or [])

    async def _create(self, body: dict[str, Any]) -> None:
        meta = body["metadata"]
        try:
            await _raw(
                self._resource.create_namespaced_resource_claim_template(
                    meta["namespace"],
                    body,  # type: ignore[arg-type]  # a plain dict is serialised as is; stubs name the model
                    _preload_content=False,
                )
            )
        except ApiException as exc:
            if exc.status == 409:
                logger.warning(
                    "a template Topoplace does not own has this name; left as it is",
                    extra={"namespace": meta["namespace"], "template": meta["name"]},
                )
            elif exc.status in (403, 404):
                # The namespace went away (or started terminating) after the list.
                logger.info(
                    "namespace gone before its template was created",
                    extra={"namespace": meta["namespace"], "template": meta["name"]},
                )
            elif exc.status == 422:
                logger.error(
                    "the API server refused the template (check the policy's CEL selectors)",
                    extra={
                        "namespace": meta["namespace"],
                        "template": meta["name"],
                        "error": describe(exc),
                    },
                )
            else:
                raise

    async def _delete(self, namespace: str, name: str, version: str) -> None:
        options = client.V1DeleteOptions(
            preconditions=client.V1Preconditions(resource_version=version or None)
        )
        try:
            await _raw(
                self._resource.delete_namespaced_resource_claim_template(
                    name, namespace, body=options, _preload_content=False
                )
            )
        except ApiException as exc:
            if exc.status not in (404, 409):  # gone already / changed since the list
                raise

    def _watching(self, call: Callable[..., Any], what: str, **params: Any) -> ListWatch:
        """Poke on every list and event: a pass reads the state itself, so only "something
        changed" matters (a list after a gap counts: events may have been missed)."""
        return ListWatch(
            call,
            what=what,
            params=params,
            on_list=lambda _snapshot: self.poke(),
            on_event=lambda _kind, _obj: self.poke(),
            backoff=Backoff(self._backoff_policy),
            sleep=self._sleep,
            watch_seconds=_WATCH_SECONDS,
            log=logger,
        )


async def _raw(call: Any) -> dict[str, Any]:
    """The JSON body as sent: no model round trip (it would drop fields this client lacks)."""
    response = await call
    try:
        data = await response.read()
    finally:
        response.release()
    # Without preloading the client raises nothing for an error status: do it here.
    if not 200 <= response.status <= 299:
        exc = ApiException(status=response.status, reason=response.reason)
        exc.body = data.decode(errors="replace")
        exc.headers = response.headers
        raise exc
    return json.loads(data)
