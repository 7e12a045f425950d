"""The template reconciler against an in-process API server, through the real client.

Each test runs the reconciler as it runs in the cluster (watches and all) with the periodic
resync turned off (an hour), so everything it does here was driven by watch events or by a
policy swap.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any

import pytest
from kubernetes_asyncio import client

from common.backoff import BackoffPolicy
from tests.webhook.claims.fake_apiserver import FakeApiServer, running
from tests.webhook.claims.test_templates import dra_policy
from webhook.claims.reconciler import TemplateReconciler
from webhook.claims.templates import MANAGED_BY, build_template
from webhook.policy.loader import PolicyOrigin, PolicySet

ALL = {"topoplace-p-1gpu", "topoplace-p-2gpu", "topoplace-p-8gpu"}


def policy_set(*policies: Any) -> PolicySet:
    return PolicySet.build([(p, PolicyOrigin("test.yaml", i + 1)) for i, p in enumerate(policies)])


async def wait_until(check: Callable[[], bool], what: str) -> None:
    """Poll `check` (state lives in the fake server, which has no event to wait on). The bound
    only ends a failing test: a loaded 2-core machine took over 5 s for a watch event."""
    try:
        async with asyncio.timeout(30):
            while not check():  # noqa: ASYNC110
                await asyncio.sleep(0.01)
    except TimeoutError:
        raise AssertionError(f"timed out after 30 s waiting for {what}") from None


@dataclass
class Running:
    fake: FakeApiServer
    reconciler: TemplateReconciler
    policies: list[PolicySet]

    def swap(self, policies: PolicySet) -> None:
        self.policies[0] = policies
        self.reconciler.poke()


@pytest.fixture
async def cluster() -> AsyncIterator[Running]:
    fake = FakeApiServer()
    fake.add_namespace("ml-a")
    fake.add_namespace("default")
    async with running(fake) as url:
        cfg = client.Configuration(host=url)
        async with client.ApiClient(configuration=cfg) as api:
            current = [policy_set(dra_policy())]
            reconciler = TemplateReconciler(
                api,
                lambda: current[0],
                resync_interval=3600,
                backoff=BackoffPolicy(initial=0.01, cap=0.05, floor=0.01),
            )
            task = asyncio.create_task(reconciler.run())
            try:
                yield Running(fake, reconciler, current)
            finally:
                task.cancel()
                await asyncio.gather(task, return_exceptions=True)


def names(fake: FakeApiServer, namespace: str) -> Callable[[], bool]:
    return lambda: fake.names(namespace) == ALL


async def test_templates_appear_in_matching_namespaces_only(cluster: Running) -> None:
    await wait_until(names(cluster.fake, "ml-a"), "the three templates in ml-a")
    assert cluster.fake.names("default") == set()
    body = cluster.fake.templates[("ml-a", "topoplace-p-2gpu")]
    assert body["metadata"]["labels"][MANAGED_BY[0]] == MANAGED_BY[1]


async def test_a_new_namespace_gets_its_templates_from_the_watch(cluster: Running) -> None:
    await wait_until(names(cluster.fake, "ml-a"), "the templates in ml-a")
    cluster.fake.add_namespace("ml-new")
    await wait_until(names(cluster.fake, "ml-new"), "the templates in the new namespace ml-new")
    cluster.fake.add_namespace("ml-gone", phase="Terminating")
    cluster.fake.add_namespace("ml-later")
    await wait_until(names(cluster.fake, "ml-later"), "the templates in ml-later")
    assert cluster.fake.names("ml-gone") == set()


async def test_policy_change_replaces_and_removes_templates(cluster: Running) -> None:
    await wait_until(names(cluster.fake, "ml-a"), "the templates in ml-a")
    old_hash = cluster.fake.templates[("ml-a", "topoplace-p-1gpu")]["metadata"]["annotations"]
    changed = dra_policy(dra={"gpuCounts": [1], "align": "numaNode"})
    cluster.swap(policy_set(changed))
    wanted = build_template(changed, 1, "ml-a")["metadata"]["annotations"]
    assert wanted != old_hash

    def replaced() -> bool:
        found = cluster.fake.templates.get(("ml-a", "topoplace-p-1gpu"))
        current = found and found["metadata"]["annotations"] == wanted
        return bool(current) and cluster.fake.names("ml-a") == {"topoplace-p-1gpu"}

    await wait_until(replaced, "the 1-GPU template rebuilt for numaNode, the others deleted")
    cluster.swap(policy_set())
    await wait_until(lambda: not cluster.fake.names("ml-a"), "every template deleted")


async def test_foreign_templates_are_never_touched(cluster: Running) -> None:
    await wait_until(names(cluster.fake, "ml-a"), "the templates in ml-a")
    foreign = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": "topoplace-p-4gpu", "namespace": "ml-a"},
        "spec": {"spec": {"devices": {"requests": []}}},
    }
    cluster.fake.put_template(foreign)
    mine = {**foreign, "metadata": {"name": "someone-elses", "namespace": "ml-a"}}
    cluster.fake.put_template(mine)
    # A policy now wants the foreign template's name: the create meets 409 and stops there.
    cluster.swap(policy_set(dra_policy(dra={"gpuCounts": [4]})))
    await wait_until(
        lambda: ("ml-a", "topoplace-p-1gpu") not in cluster.fake.templates,
        "the templates of the old counts deleted",
    )
    cluster.swap(policy_set())
    passes = cluster.reconciler.passes
    await wait_until(lambda: cluster.reconciler.passes > passes, "one more pass")
    assert cluster.fake.names("ml-a") == {"topoplace-p-4gpu", "someone-elses"}
    assert cluster.fake.templates[("ml-a", "topoplace-p-4gpu")]["spec"] == foreign["spec"]
    deletes = {path for method, path in cluster.fake.writes() if method == "DELETE"}
    assert not any(p.endswith(("/topoplace-p-4gpu", "/someone-elses")) for p in deletes)


async def test_deleted_templates_come_back_and_server_errors_are_retried(
    cluster: Running,
) -> None:
    await wait_until(names(cluster.fake, "ml-a"), "the templates in ml-a")
    cluster.fake.fail_next = 3  # the next list calls fail with 500
    cluster.fake.delete_namespace("default")  # an event, so a pass starts (and fails)
    del cluster.fake.templates[("ml-a", "topoplace-p-8gpu")]  # silently, no event
    cluster.fake.add_namespace("ml-b")
    await wait_until(names(cluster.fake, "ml-b"), "templates in ml-b after the failures")
    await wait_until(names(cluster.fake, "ml-a"), "the silently deleted template recreated")


async def test_a_dropped_watch_is_reopened(cluster: Running) -> None:
    await wait_until(names(cluster.fake, "ml-a"), "the templates in ml-a")
    cluster.fake.drop_watches()
    await asyncio.sleep(0)  # let the streams see the end
    await wait_until(lambda: len(cluster.fake._watchers) == 2, "both watches reopened")
    cluster.fake.add_namespace("ml-c")
    await wait_until(names(cluster.fake, "ml-c"), "templates in ml-c after the reconnect")


async def test_without_policies_nothing_is_written() -> None:
    fake = FakeApiServer()
    fake.add_namespace("ml-a")
    async with running(fake) as url, client.ApiClient(client.Configuration(host=url)) as api:
        plan = await TemplateReconciler(api, lambda: None).reconcile_once()
    assert not plan and fake.requests == []
