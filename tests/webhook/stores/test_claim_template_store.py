"""The webhook's DRA template cache through the real client against an in-process API server:
it answers "cannot tell" until listed, then follows creates and deletes from the watch."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest
from kubernetes_asyncio import client

from common.backoff import Backoff, BackoffPolicy
from tests.webhook.claims.fake_apiserver import FakeApiServer, running
from tests.webhook.claims.test_reconciler import wait_until
from webhook.claims.templates import MANAGED_SELECTOR as RECONCILER_SELECTOR
from webhook.stores.claim_template_store import MANAGED_SELECTOR, ClaimTemplateStore


def template(namespace: str, name: str, *, ours: bool = True) -> dict[str, Any]:
    labels = {"app.kubernetes.io/managed-by": "topoplace"} if ours else {}
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": name, "namespace": namespace, "labels": labels},
        "spec": {"spec": {"devices": {"requests": []}}},
    }


@pytest.fixture
async def cache() -> AsyncIterator[tuple[FakeApiServer, ClaimTemplateStore]]:
    fake = FakeApiServer()
    fake.add_namespace("ml-a")
    fake.put_template(template("ml-a", "topoplace-p-1gpu"))
    fake.put_template(template("ml-a", "someone-elses", ours=False))
    async with running(fake) as url, client.ApiClient(client.Configuration(host=url)) as api:
        templates = ClaimTemplateStore(
            backoff=Backoff(BackoffPolicy(initial=0.01, cap=0.05, floor=0.01))
        )
        assert templates.lookup("ml-a", "topoplace-p-1gpu") is None  # not listed yet: trust
        task = asyncio.create_task(templates.follow(client.ResourceV1Api(api)))
        try:
            yield fake, templates
        finally:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)


def test_the_selector_is_the_reconcilers() -> None:
    assert MANAGED_SELECTOR == RECONCILER_SELECTOR


async def test_follows_topoplace_templates_only(
    cache: tuple[FakeApiServer, ClaimTemplateStore],
) -> None:
    fake, templates = cache
    # This fake sends a watch only what happens after it opens, so wait for that.
    await wait_until(lambda: templates.ready and fake.watching("templates"), "the watch")
    assert templates.lookup("ml-a", "topoplace-p-1gpu") is True
    assert templates.lookup("ml-a", "topoplace-p-2gpu") is False
    assert templates.lookup("ml-a", "someone-elses") is False  # not ours: not listed
    fake.add_namespace("ml-new")
    fake.put_template(template("ml-new", "topoplace-p-1gpu"))
    await wait_until(lambda: templates.lookup("ml-new", "topoplace-p-1gpu") is True, "the ADDED")
    fake.delete_namespace("ml-new")
    await wait_until(lambda: templates.lookup("ml-new", "topoplace-p-1gpu") is False, "DELETED")


async def test_a_dropped_watch_or_a_failure_resumes_from_the_last_version(
    cache: tuple[FakeApiServer, ClaimTemplateStore],
) -> None:
    fake, templates = cache
    await wait_until(lambda: templates.ready, "the first list")
    fake.fail_next = 2
    fake.drop_watches()
    fake.put_template(template("ml-a", "topoplace-p-8gpu"))  # while the watch is down
    await wait_until(lambda: templates.lookup("ml-a", "topoplace-p-8gpu") is True, "the resume")
