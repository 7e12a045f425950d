"""The extender's ledger (issue 45): a bound pod's predicted share counts until the node's
NodeResourceTopology shows it, then the observed counts replace it; bad input never makes it
go negative or leak. kube-scheduler, the watch and the agent are played step by step with
the objects the API server sends (extender_calls.py)."""

from __future__ import annotations

import logging

import pytest

from tests.webhook.scheduler.extender_calls import (
    Extender,
    args,
    bound,
    dgx,
    pod,
    refused,
    started,
)


async def test_the_object_catching_up_replaces_the_prediction(extender: Extender) -> None:
    extender.nrts.apply("ADDED", dgx("dgx-a", (3, 3)))
    p = pod("p", 2, cpus=8)
    await extender.filter(args(p, "dgx-a"))
    extender.watch("MODIFIED", bound(p, "dgx-a"))
    assert extender.free("dgx-a") == (1, 3)
    assert extender.free("dgx-a", "cpu") == (102, 112)  # 8 exclusive CPUs on NUMA node 0
    extender.watch("MODIFIED", started(bound(p, "dgx-a")))
    assert extender.free("dgx-a") == (1, 3)  # admitted; the object does not show it yet
    extender.nrts.apply("MODIFIED", dgx("dgx-a", (1, 3), free_cpus=(102, 112)))
    assert extender.ledger.pending("dgx-a") == 0
    assert extender.free("dgx-a") == (1, 3)  # observed, not counted twice
    assert extender.outcomes == ["right"]
    extender.watch("DELETED", started(bound(p, "dgx-a")))
    assert extender.free("dgx-a") == (1, 3)  # what it held frees when the object says so


async def test_an_object_showing_the_pod_before_its_status_does_not_count_it_twice(
    extender: Extender,
) -> None:
    extender.nrts.apply("ADDED", dgx("dgx-a", (3, 3)))
    p = pod("p", 2)
    await extender.filter(args(p, "dgx-a"))
    extender.watch("MODIFIED", bound(p, "dgx-a"))
    extender.nrts.apply("MODIFIED", dgx("dgx-a", (1, 3), free_cpus=(102, 112)))
    assert extender.free("dgx-a") == (1, 3)
    assert extender.ledger.pending("dgx-a") == 0


async def test_a_wrong_numa_node_is_counted_and_logged_once(
    extender: Extender, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="webhook.scheduler.accounting")
    extender.nrts.apply("ADDED", dgx("dgx-a", (3, 3)))
    p = pod("p", 2)
    await extender.filter(args(p, "dgx-a"))
    extender.watch("MODIFIED", bound(p, "dgx-a"))
    extender.watch("MODIFIED", started(bound(p, "dgx-a")))
    extender.nrts.apply("MODIFIED", dgx("dgx-a", (3, 1), free_cpus=(110, 104)))
    extender.nrts.apply("MODIFIED", dgx("dgx-a", (3, 0), free_cpus=(110, 100)))
    assert extender.outcomes == ["other_numa_nodes"]
    wrong = [r for r in caplog.records if r.getMessage() == "NUMA placement predicted wrong"]
    assert len(wrong) == 1 and wrong[0].pod == "ml/p"  # type: ignore[attr-defined]
    assert extender.free("dgx-a") == (3, 0)  # the object's word from then on


async def test_a_refused_pod_frees_its_share_at_once_and_counts(extender: Extender) -> None:
    extender.nrts.apply("ADDED", dgx("dgx-a", (2, 0)))
    p = pod("p", 2)
    await extender.filter(args(p, "dgx-a"))
    extender.watch("MODIFIED", bound(p, "dgx-a"))
    assert extender.free("dgx-a") == (0, 0)
    extender.watch("MODIFIED", refused(bound(p, "dgx-a")))
    assert extender.free("dgx-a") == (2, 0)
    assert extender.outcomes == ["refused"]
    extender.watch("DELETED", refused(bound(p, "dgx-a")))
    assert extender.outcomes == ["refused"] and extender.ledger.pending_pods() == []


async def test_a_pod_deleted_before_admission_frees_its_share_and_leaves_nothing(
    extender: Extender,
) -> None:
    extender.nrts.apply("ADDED", dgx("dgx-a", (4, 4)))
    p = pod("p", 4)
    await extender.filter(args(p, "dgx-a"))
    extender.watch("MODIFIED", bound(p, "dgx-a"))
    assert extender.free("dgx-a") == (0, 4)
    extender.watch("DELETED", bound(p, "dgx-a"))
    assert extender.free("dgx-a") == (4, 4)
    assert extender.ledger.pending_pods() == [] and extender.ledger.pending("dgx-a") == 0
    assert extender.outcomes == []


async def test_pods_bound_by_another_scheduler_count_and_never_go_negative(
    extender: Extender,
) -> None:
    extender.nrts.apply("ADDED", dgx("dgx-a", (2, 1)))
    for i in range(4):  # the default scheduler binds more than the node has, NUMA-blind
        other = pod(f"blind-{i}", 1)
        other["spec"]["schedulerName"] = "default-scheduler"
        extender.watch("ADDED", bound(other, "dgx-a"))
    assert extender.free("dgx-a") == (0, 0)  # three counted; the fourth its kubelet refuses
    assert extender.ledger.pending("dgx-a") == 3
    p = pod("p", 1)
    assert (await extender.filter(args(p, "dgx-a")))["NodeNames"] == []
    extender.watch("MODIFIED", refused(bound(pod("blind-0", 1), "dgx-a")))
    assert extender.outcomes == []  # not a pod the extender let through
    assert extender.free("dgx-a") == (1, 0)
    # A pod admitted long ago ends, and the object changes for it and something else: the
    # change cannot be read pod by pod, so the two pending shares stay, and no count goes
    # below zero.
    old = started(bound(pod("old", 1), "dgx-a"))
    extender.watch("DELETED", old)
    extender.nrts.apply("MODIFIED", dgx("dgx-a", (0, 1)))
    assert extender.ledger.pending("dgx-a") == 2
    assert extender.free("dgx-a") == (0, 0)


async def test_a_stale_object_is_named_and_the_share_kept(
    extender: Extender, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="webhook.scheduler.accounting")
    extender.nrts.apply("ADDED", dgx("dgx-a", (2, 0)))
    p = pod("p", 2)
    await extender.filter(args(p, "dgx-a"))
    extender.watch("MODIFIED", bound(p, "dgx-a"))
    extender.watch("MODIFIED", started(bound(p, "dgx-a")))
    extender.clock.now += 60  # the agent is down: no rewrite of the object
    result = await extender.filter(args(pod("q", 2), "dgx-a"))
    assert result["FailedNodes"]["dgx-a"] == (
        "2 GPUs asked, 0 free on the whole node; NodeResourceTopology not updated 60s "
        "after the kubelet admitted 1 pod(s) (agent down?); their share is counted"
    )
    await extender.filter(args(pod("r", 2), "dgx-a"))
    stale = [r for r in caplog.records if r.getMessage() == "stale NodeResourceTopology"]
    assert len(stale) == 1
    extender.watch("DELETED", started(bound(p, "dgx-a")))
    assert extender.free("dgx-a") == (2, 0) and extender.ledger.stale("dgx-a") is None


async def test_a_relist_drops_pods_gone_and_a_deleted_object_its_node(
    extender: Extender,
) -> None:
    extender.nrts.apply("ADDED", dgx("dgx-a", (4, 4)))
    extender.nrts.apply("ADDED", dgx("dgx-b", (4, 4)))
    kept, gone, other = pod("kept", 2), pod("gone", 2), pod("other", 4)
    for p, node in ((kept, "dgx-a"), (gone, "dgx-a"), (other, "dgx-b")):
        extender.watch("ADDED", bound(p, node))
    assert extender.free("dgx-a") == (0, 4) and extender.free("dgx-b") == (0, 4)
    extender.ledger.pods_listed([bound(kept, "dgx-a"), bound(other, "dgx-b")])
    assert extender.free("dgx-a") == (2, 4)
    extender.nrts.apply("DELETED", dgx("dgx-b", (4, 4)))
    assert extender.ledger.zones_of("dgx-b") is None
    assert extender.ledger.pending_pods() == ["ml/kept"]


async def test_a_pod_shown_before_its_status_on_other_numa_nodes_is_dropped_once_settled(
    extender: Extender,
) -> None:
    """The agent's write came before the kubelet's status, on other NUMA nodes than
    predicted: the counts cannot say it is the pod's, so its share stays a while; once it
    has been admitted SETTLE_S and the object changed since, the object's word stands."""
    extender.nrts.apply("ADDED", dgx("dgx-a", (3, 3)))
    p = pod("p", 2)
    await extender.filter(args(p, "dgx-a"))
    extender.watch("MODIFIED", bound(p, "dgx-a"))  # predicted on NUMA node 0
    extender.nrts.apply("MODIFIED", dgx("dgx-a", (3, 1), free_cpus=(110, 104)))
    extender.watch("MODIFIED", started(bound(p, "dgx-a")))
    assert extender.free("dgx-a") == (1, 1)  # counted twice for now (conservative)
    extender.clock.now += 11
    assert (await extender.filter(args(pod("q", 2), "dgx-a")))["NodeNames"] == ["dgx-a"]
    assert extender.free("dgx-a") == (3, 1) and extender.ledger.pending("dgx-a") == 0
