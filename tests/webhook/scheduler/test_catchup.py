"""A pod turned away while a node's NodeResourceTopology lags a change kube-scheduler saw
(catchup.py): its filter waits for the object, or asks kube-scheduler to retry, so the pod
is not left in kube-scheduler's unschedulable pool with room free. Over real HTTP."""

from __future__ import annotations

import asyncio
import copy

from tests.webhook.scheduler.extender_calls import Extender, args, bound, dgx, pod, started
from webhook.scheduler.catchup import RETRY_S, WAIT_S


def _running_on(extender: Extender, name: str, gpus: int, node: str) -> dict:
    """A pod the object shows already (bound, admitted, counted in the counts)."""
    p = started(bound(pod(name, gpus), node))
    p["status"]["phase"] = "Running"
    extender.watch("ADDED", p)
    return p


async def _catching(extender: Extender) -> None:
    for _ in range(1000):
        if extender.ledger.catching == 1:
            return
        await asyncio.sleep(0)
    raise AssertionError("the filter did not wait for the object")


async def test_a_pod_turned_away_where_a_pod_just_ended_passes_once_the_object_shows_it(
    extender: Extender,
) -> None:
    extender.nrts.apply("ADDED", dgx("dgx-a", (0, 1)))  # `old` holds NUMA node 0's 2 GPUs
    extender.nrts.apply("ADDED", dgx("dgx-b", (0, 0)))
    old = _running_on(extender, "old", 2, "dgx-a")
    extender.watch("DELETED", old)  # kube-scheduler sees it and retries the waiting pod
    asked = asyncio.create_task(extender.filter(args(pod("waiting", 2), "dgx-a", "dgx-b")))
    await _catching(extender)
    extender.nrts.apply("MODIFIED", dgx("dgx-b", (0, 1)))  # another node: still waiting
    for _ in range(20):
        await asyncio.sleep(0)
    assert extender.ledger.catching == 1 and not asked.done()
    extender.nrts.apply("MODIFIED", dgx("dgx-a", (2, 1)))  # the agent's rewrite
    result = await asked
    assert result["NodeNames"] == ["dgx-a"] and result["Error"] == ""
    assert extender.ledger.retries == 0


async def test_an_object_still_behind_asks_kube_scheduler_to_retry_then_the_pod_waits(
    extender: Extender,
) -> None:
    extender.nrts.apply("ADDED", dgx("dgx-a", (0, 1)))
    extender.watch("DELETED", _running_on(extender, "old", 2, "dgx-a"))
    extender.clock.now += WAIT_S + 1  # no rewrite yet: waiting longer would not help
    result = await extender.filter(args(pod("waiting", 2), "dgx-a"))
    assert result["NodeNames"] == []
    assert result["Error"] == (
        "NodeResourceTopology of dgx-a not updated 3s after a pod started or ended there; "
        "kube-scheduler retries the pod after its backoff"
    )
    assert extender.ledger.retries == 1
    extender.clock.now += RETRY_S  # the agent is down: the pod waits as any other
    result = await extender.filter(args(pod("waiting", 2), "dgx-a"))
    assert result["Error"] == "" and list(result["FailedNodes"]) == ["dgx-a"]


async def test_a_pod_with_no_room_and_nothing_changing_is_turned_away_at_once(
    extender: Extender,
) -> None:
    extender.nrts.apply("ADDED", dgx("dgx-a", (0, 2)))
    _running_on(extender, "old", 2, "dgx-a")
    other = _running_on(extender, "cpu-only", 0, "dgx-a")
    cpu_only = copy.deepcopy(other)
    for c in cpu_only["spec"]["containers"]:
        c["resources"] = {}  # holds nothing of a NUMA node: its end frees nothing
    extender.watch("DELETED", cpu_only)
    result = await extender.filter(args(pod("waiting", 4), "dgx-a"))
    assert result["Error"] == "" and list(result["FailedNodes"]) == ["dgx-a"]
    assert extender.ledger.catching == 0 and extender.ledger.retries == 0


async def test_a_pod_admitted_and_still_counted_makes_the_next_filter_wait_for_the_object(
    extender: Extender,
) -> None:
    """The burst's third pod, requeued by the first two pods' status updates: the object
    showing them changes nothing for it, and it is turned away without an error."""
    extender.nrts.apply("ADDED", dgx("dgx-a", (3, 3)))
    first, second = pod("p0", 2), pod("p1", 2)
    for p in (first, second):
        assert (await extender.filter(args(p, "dgx-a")))["NodeNames"] == ["dgx-a"]
        extender.watch("MODIFIED", bound(p, "dgx-a"))
    for p in (first, second):
        extender.watch("MODIFIED", started(bound(p, "dgx-a")))
    asked = asyncio.create_task(extender.filter(args(pod("p2", 2), "dgx-a")))
    await _catching(extender)
    extender.nrts.apply("MODIFIED", dgx("dgx-a", (1, 1), free_cpus=(102, 104)))
    result = await asked
    assert result["NodeNames"] == [] and result["Error"] == ""
    assert extender.ledger.pending("dgx-a") == 0
