"""`serve --workload-spans`' collector through the real client against an API server speaking
the real list+watch protocol (HTTPS, bearer token, selectors, watch events): the series it
exports follow pods starting, finishing and nodes relabelled, and say nothing before both
lists are in."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from common.backoff import Backoff, BackoffPolicy
from common.vocabulary import Label
from tests.agent.sync.fake_apiserver import FakeApiServer
from tests.webhook.claims.test_reconciler import wait_until
from tests.webhook.spans.fleet import node_labels, pod
from webhook.spans.watch import WorkloadSpans

JOB = {"batch.kubernetes.io/job-name": "train"}
Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def samples(registry: CollectorRegistry) -> Samples:
    text = generate_latest(registry).decode()
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def of(name: str, **labels: str) -> tuple[str, tuple[tuple[str, str], ...]]:
    return (
        f"topoplace_webhook_workload_{name}",
        tuple(sorted({"namespace": "ml", "kind": "Job", "workload": "train", **labels}.items())),
    )


@pytest.fixture
async def watched(
    tmp_path: Path,
) -> AsyncIterator[
    tuple[FakeApiServer, dict[str, dict[str, str]], CollectorRegistry, WorkloadSpans]
]:
    labels = node_labels("w1", "w2", "w3", "w4")
    known: list[dict[str, dict[str, str]] | None] = [None]  # the node cache, not listed yet
    async with FakeApiServer(tmp_path) as api:
        api.pods.add(pod("train-0", "w1", JOB))
        api.pods.add(pod("train-1", "w2", JOB))
        api.pods.add(pod("other", "w3", JOB | {"topoplace.io/policy": "x"}, namespace="b"))
        unopted = pod("plain", "w4", {"batch.kubernetes.io/job-name": "plain"})
        del unopted["metadata"]["labels"]["topoplace.io/policy"]
        api.pods.add(unopted)
        spans = WorkloadSpans(
            lambda: known[0], backoff=Backoff(BackoffPolicy(initial=0.01, cap=0.05, floor=0.01))
        )
        registry = CollectorRegistry()
        registry.register(spans)
        assert samples(registry) == {}  # nothing listed: nothing said
        task = asyncio.create_task(spans.run(api.write_kubeconfig()))
        try:
            await wait_until(lambda: spans.ready and bool(api.pods.watches), "list and watch")
            assert samples(registry) == {}  # pods listed, nodes not yet: still nothing
            known[0] = labels
            yield api, labels, registry, spans
        finally:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)


async def test_asks_only_for_placed_pods_that_opted_in(watched) -> None:  # type: ignore[no-untyped-def]
    api, _, registry, _ = watched
    (watch,) = api.pods.watches
    assert watch["labelSelector"] == "topoplace.io/policy"
    assert watch["fieldSelector"] == "spec.nodeName!=,status.phase!=Succeeded,status.phase!=Failed"
    got = samples(registry)
    assert got[of("pods")] == 2 and got[of("nodes")] == 2
    assert got[of("domains", level="network-tier-1")] == 1
    assert got[of("max_hops")] == 1
    assert of("pods", workload="plain") not in got  # no policy label: not asked for
    assert got[of("pods", namespace="b")] == 1  # one name, another namespace: its own series


async def test_follows_pods_and_node_labels(watched) -> None:  # type: ignore[no-untyped-def]
    api, labels, registry, spans = watched
    api.pods.add(pod("train-2", "w4", JOB))  # lands in the other block
    await wait_until(lambda: samples(registry).get(of("pods")) == 3, "the ADDED pod")
    got = samples(registry)
    assert got[of("domains", level="network-tier-2")] == 2 and got[of("max_hops")] == 5

    api.pods.set_phase("uid-ml-train-2", "Succeeded")  # leaves the selection: DELETED
    await wait_until(lambda: samples(registry).get(of("pods")) == 2, "the finished pod")
    assert samples(registry)[of("max_hops")] == 1

    del labels["w2"][Label.NETWORK_TIER_1]  # relabelled: seen at the next scrape, no event
    del labels["w2"][Label.NETWORK_TIER_2]
    del labels["w2"][Label.NETWORK_TIER_3]
    got = samples(registry)
    assert of("max_hops") not in got and got[of("unknown_hop_pairs")] == 1

    api.pods.delete("uid-ml-train-0")
    api.pods.delete("uid-ml-train-1")
    await wait_until(lambda: of("pods") not in samples(registry), "the workload gone")
    assert spans.events >= 4
