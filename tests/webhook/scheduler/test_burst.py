"""The extender under a burst (issue 45): the pods kube-scheduler binds together each see
the ones before them, a filter waits for a bind only when it could change its answer, and
prioritize scores the NUMA node the kubelet picks. Over real HTTP (extender_calls.py)."""

from __future__ import annotations

import asyncio

import pytest

from tests.webhook.scheduler.extender_calls import (
    Extender,
    args,
    bound,
    dgx,
    held,
    pod,
    running_extender,
)


async def test_a_burst_of_three_two_gpu_pods_lets_one_per_numa_node_through(
    extender: Extender,
) -> None:
    """The incident: 3 GPUs free on each NUMA node, three 2-GPU pods created together."""
    extender.nrts.apply("ADDED", dgx("dgx-a", (3, 3)))
    pods = [pod(f"burst-{i}", 2) for i in range(3)]
    placed = []
    for p in pods:
        result = await extender.filter(args(p, "dgx-a"))
        if result["NodeNames"]:
            extender.watch("MODIFIED", bound(p, "dgx-a"))  # kube-scheduler binds it
            placed.append((p["metadata"]["name"], extender.free("dgx-a")))
        else:
            assert result["FailedNodes"] == {
                "dgx-a": "no NUMA node has 2 GPUs and 8 CPUs free together (free per NUMA "
                "node: GPUs 1, 1; CPUs 102, 104)"
            }
    # The kubelet's order: NUMA node 0 first, then 1; the third pod waits.
    assert placed == [("burst-0", (1, 3)), ("burst-1", (1, 1))]
    assert extender.ledger.pending("dgx-a") == 2


async def test_the_next_filter_waits_until_the_pod_passed_before_shows_bound(
    extender: Extender,
) -> None:
    extender.nrts.apply("ADDED", dgx("dgx-a", (3, 3)))
    first, second, third = (pod(f"p{i}", 2) for i in range(3))
    assert (await extender.filter(args(first, "dgx-a")))["NodeNames"] == ["dgx-a"]
    extender.watch("MODIFIED", bound(first, "dgx-a"))
    assert (await extender.filter(args(second, "dgx-a")))["NodeNames"] == ["dgx-a"]
    # kube-scheduler asks about the third pod before the second one's bind shows.
    asked = asyncio.create_task(extender.filter(args(third, "dgx-a")))
    await held(extender.ledger, 1)
    extender.watch("MODIFIED", bound(second, "dgx-a"))
    result = await asked
    assert result["NodeNames"] == []  # both NUMA nodes hold 1 GPU now
    assert extender.ledger.inflight.holding == 0 and extender.ledger.inflight.waits == 1


async def test_a_filter_whose_verdict_no_pod_in_flight_can_change_does_not_wait(
    extender: Extender,
) -> None:
    """Pods spread over nodes with room to spare: no filter waits for another's bind."""
    extender.nrts.apply("ADDED", dgx("dgx-a", (4, 4)))
    extender.nrts.apply("ADDED", dgx("dgx-b", (4, 4)))
    for i in range(3):  # none bound yet: all three in flight
        answer = await extender.filter(args(pod(f"p{i}", 1), "dgx-a", "dgx-b"))
        assert answer["NodeNames"] == ["dgx-a", "dgx-b"]
    assert extender.ledger.inflight.waits == 0


async def test_a_pod_passed_but_never_bound_stops_holding_after_hold_s() -> None:
    async with running_extender(hold_s=0.0) as extender:
        extender.nrts.apply("ADDED", dgx("dgx-a", (2, 0)))
        for name in ("lost", "next"):  # kube-scheduler gave up on "lost" after the filter
            answer = await extender.filter(args(pod(name, 2), "dgx-a"))
            assert answer["NodeNames"] == ["dgx-a"]  # nothing counted for it
        assert extender.ledger.pending("dgx-a") == 0


async def test_prioritize_scores_the_numa_node_the_kubelet_picks(extender: Extender) -> None:
    """Two idle DGX H100s and a burst of 2-GPU pods: the second pod scores the half-full NUMA
    node of the first one's node highest, so the burst fills NUMA nodes in the kubelet's
    order; and a node is scored on the kubelet's pick, not on its tightest NUMA node."""
    extender.nrts.apply("ADDED", dgx("dgx-a", (4, 4)))
    extender.nrts.apply("ADDED", dgx("dgx-b", (4, 4)))
    first, second = pod("first", 2), pod("second", 2)
    assert await extender.prioritize(args(first, "dgx-a", "dgx-b")) == {"dgx-a": 5, "dgx-b": 5}
    await extender.filter(args(first, "dgx-a", "dgx-b"))
    extender.watch("MODIFIED", bound(first, "dgx-b"))
    await extender.filter(args(second, "dgx-a", "dgx-b"))
    assert await extender.prioritize(args(second, "dgx-a", "dgx-b")) == {"dgx-a": 5, "dgx-b": 10}
    # 4 + 2 free: the kubelet takes NUMA node 0 (the lowest that holds 2), half of its GPUs.
    extender.nrts.apply("ADDED", dgx("dgx-c", (4, 2)))
    assert (await extender.prioritize(args(pod("third", 2), "dgx-c")))["dgx-c"] == 5


async def test_a_pod_without_uid_or_nodes_is_answered_and_holds_nothing(
    extender: Extender,
) -> None:
    extender.nrts.apply("ADDED", dgx("dgx-a", (4, 4)))
    p = pod("p", 1)
    del p["metadata"]["uid"]
    assert (await extender.filter(args(p, "dgx-a")))["NodeNames"] == ["dgx-a"]
    assert (await extender.filter(args(pod("q", 1), "no-object")))["NodeNames"] == ["no-object"]
    # Neither holds the next filter: one has no uid, the other passed no node with an object.
    assert (await extender.filter(args(pod("r", 1), "dgx-a")))["NodeNames"] == ["dgx-a"]


@pytest.mark.parametrize(
    ("fits", "tightness", "expected"),
    [(True, 1.0, 10), (True, 0.25, 3), (True, 0.35, 4), (True, 0.5, 5), (True, 0.04, 0),
     (False, 1.0, 0)],
)  # fmt: skip
def test_scores_round_halves_up(fits: bool, tightness: float, expected: int) -> None:
    """1 GPU of 4 free scores 3, not round()'s 2 (halves to even): 1 of 4 and 1 of 3 tie."""
    from webhook.placement_model.free_now import FreeFit
    from webhook.scheduler.extender import score

    assert score(FreeFit(fits, tightness=tightness)) == expected
    assert score(None) == 0
