"""The extender under a burst: it counts the pods it let through until the node's
NodeResourceTopology shows them (issue 45).

kube-scheduler is played step by step over real HTTP: an ExtenderArgs body as it sends it (Go
field names, the whole Pod, node names only), then the bind as the pod watch delivers it (the
Pod with `spec.nodeName`), then the kubelet's status, then the agent's rewritten object. The
objects are the ones the API server sends; nothing of the ledger is poked directly.
"""

from __future__ import annotations

import asyncio
import copy
import logging
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer

from tests.webhook.topology.nrt import nrt
from webhook.scheduler.accounting import Ledger
from webhook.scheduler.nrt_cache import NrtCache
from webhook.scheduler.routes import add_routes

SCHEDULER = "topoplace-numa-scheduler"
# A DGX H100 under single-numa-node, pod scope, static CPU manager (2 CPUs reserved).
DGX = {"policy": "single-numa-node", "scope": "pod", "cpus_per_zone": 112}


def dgx(node: str, free_gpus: Sequence[int], free_cpus: Sequence[int] = (110, 112)) -> Any:
    obj = nrt(node, free_gpus, free_cpus=free_cpus, **DGX)  # type: ignore[arg-type]
    for resource in obj["zones"][0]["resources"]:
        if resource["name"] == "cpu":
            resource["allocatable"] = "110"  # reservedSystemCPUs 0,1: the static CPU manager
    return obj


def pod(name: str, gpus: int, *, cpus: int = 8, uid: str | None = None) -> dict[str, Any]:
    """A Pod as kube-scheduler holds it: admitted by the webhook (Guaranteed), defaulted."""
    limits = {"cpu": str(cpus), "memory": "64Gi", "nvidia.com/gpu": str(gpus)}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "ml", "uid": uid or f"uid-{name}",
                     "labels": {"topoplace.io/policy": "numa"}},
        "spec": {
            "schedulerName": SCHEDULER,
            "containers": [{"name": "trainer", "image": "x",
                            "resources": {"limits": limits, "requests": dict(limits)}}],
        },
        "status": {"phase": "Pending", "conditions": [{"type": "PodScheduled", "status": "False"}]},
    }  # fmt: skip


def bound(p: dict[str, Any], node: str) -> dict[str, Any]:
    """The Pod after the binding: what the watch delivers (MODIFIED)."""
    out = copy.deepcopy(p)
    out["spec"]["nodeName"] = node
    out["status"]["conditions"] = [{"type": "PodScheduled", "status": "True"}]
    return out


def started(p: dict[str, Any]) -> dict[str, Any]:
    """The kubelet's first status: it admitted the pod."""
    out = copy.deepcopy(p)
    out["status"].update(
        phase="Pending",
        hostIP="127.0.0.1",
        startTime="2026-12-06T08:00:00Z",
        containerStatuses=[{"name": "trainer", "ready": False,
                            "state": {"waiting": {"reason": "ContainerCreating"}}}],
    )  # fmt: skip
    return out


def refused(p: dict[str, Any]) -> dict[str, Any]:
    out = copy.deepcopy(p)
    out["status"].update(
        phase="Failed",
        reason="TopologyAffinityError",
        message="Pod was rejected: Resources cannot be allocated with Topology locality",
    )
    return out


def args(p: dict[str, Any], *nodes: str) -> dict[str, Any]:
    return {"Pod": p, "Nodes": None, "NodeNames": list(nodes)}


@dataclass
class Clock:
    now: float = 1000.0

    def __call__(self) -> float:
        return self.now


@dataclass
class Extender:
    http: TestClient[Any, Any]
    nrts: NrtCache
    ledger: Ledger
    clock: Clock
    outcomes: list[str] = field(default_factory=list)

    async def filter(self, body: dict[str, Any]) -> dict[str, Any]:
        answer = await self.http.post("/scheduler/filter", json=body)
        assert answer.status == 200, await answer.text()
        result: dict[str, Any] = await answer.json()
        return result

    async def prioritize(self, body: dict[str, Any]) -> dict[str, int]:
        answer = await self.http.post("/scheduler/prioritize", json=body)
        assert answer.status == 200, await answer.text()
        return {h["Host"]: h["Score"] for h in await answer.json()}

    def free(self, node: str, resource: str = "nvidia.com/gpu") -> tuple[int, ...]:
        zones = self.ledger.zones_of(node)
        assert zones is not None
        return tuple(int(v) for v in zones.free(resource))

    def watch(self, kind: str, obj: dict[str, Any]) -> None:
        self.ledger.pod_event(kind, obj)


@pytest.fixture
async def extender() -> AsyncIterator[Extender]:
    clock = Clock()
    outcomes: list[str] = []
    nrts = NrtCache()
    ledger = Ledger(nrts.get, clock=clock, on_outcome=outcomes.append, hold_s=30.0)
    nrts.on_change = ledger.nrt_changed
    ledger.pods_listed([])  # the bound pods' first list is in
    app = web.Application()
    add_routes(app, ledger)
    async with TestClient(TestServer(app)) as http:
        yield Extender(http, nrts, ledger, clock, outcomes)


async def held(ledger: Ledger, count: int) -> None:
    """Until `count` filters wait in the ledger's hold (each loop pass lets them run)."""
    for _ in range(1000):
        if ledger.inflight.holding == count:
            return
        await asyncio.sleep(0)
    raise AssertionError(f"{ledger.inflight.holding} filters held, expected {count}")


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
    clock = Clock()
    nrts = NrtCache()
    ledger = Ledger(nrts.get, clock=clock, hold_s=0.0)
    nrts.on_change = ledger.nrt_changed
    ledger.pods_listed([])
    nrts.apply("ADDED", dgx("dgx-a", (2, 0)))
    app = web.Application()
    add_routes(app, ledger)
    async with TestClient(TestServer(app)) as http:
        for name in ("lost", "next"):
            answer = await http.post("/scheduler/filter", json=args(pod(name, 2), "dgx-a"))
            assert (await answer.json())["NodeNames"] == ["dgx-a"]  # nothing counted, no wait


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
    from webhook.scheduler.extender import score
    from webhook.topology.fit import FreeFit

    assert score(FreeFit(fits, tightness=tightness)) == expected
    assert score(None) == 0
