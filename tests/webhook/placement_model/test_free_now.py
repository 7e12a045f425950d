"""Free capacity per NUMA node: the kubelet's merge replayed on `available` counts."""

from __future__ import annotations

import pytest

from tests.webhook.placement_model.nrt import nrt
from webhook.placement_model.free_now import free_fit
from webhook.placement_model.kubelet_admission import PodUnits
from webhook.placement_model.requests import Unit
from webhook.placement_model.zones import ZoneError, zones_from_object

GPU = "nvidia.com/gpu"


def fit(obj, *units, guaranteed=False):
    """`units` as the kubelet aligns them: a Burstable pod's CPUs and memory get no hints."""
    kept = ("cpu", "memory") if guaranteed else ()
    aligned = tuple(Unit({n: v for n, v in u.items() if "/" in n or n in kept}) for u in units)
    return free_fit(zones_from_object(obj), PodUnits(aligned, aligned))


def reserve(obj, cpus=2, memory=4 << 30):
    """As a kubelet with the static CPU and Static memory managers publishes it: some of
    NUMA node 0 kept back (allocatable < capacity)."""
    for item in obj["zones"][0]["resources"]:
        if item["name"] in ("cpu", "memory"):
            item["capacity"] = str(
                int(item["capacity"]) + (cpus if item["name"] == "cpu" else memory)
            )
    return obj


def test_the_incident_two_and_two_free_is_no_room_for_four():
    verdict = fit(nrt("a", [2, 2]), {GPU: 4})
    assert not verdict.fits
    assert verdict.reason == "no NUMA node has 4 free GPUs (free: 2, 2)"


def test_four_free_on_one_numa_node_fits_exactly():
    verdict = fit(nrt("b", [4, 0]), {GPU: 4})
    assert verdict.fits and verdict.tightness == 1.0


def test_tightest_numa_node_is_taken_and_scored():
    loose = fit(nrt("a", [4, 4]), {GPU: 2})
    tight = fit(nrt("b", [2, 4]), {GPU: 2})
    assert loose.fits and tight.fits and tight.tightness > loose.tightness


def test_containers_take_their_gpus_one_after_another():
    # scope container: 2 + 2 GPUs in two containers fit 2, 2 free; 3 + 1 does not
    assert fit(nrt("a", [2, 2]), {GPU: 2}, {GPU: 2}).fits
    verdict = fit(nrt("a", [2, 2]), {GPU: 3}, {GPU: 1})
    assert verdict.reason == "no NUMA node has 3 free GPUs (free: 2, 2)"


def test_restricted_needs_the_narrowest_width_free():
    obj = nrt("a", [4, 3, 4, 0], policy="restricted")
    assert fit(obj, {GPU: 8}).fits  # two NUMA nodes with 4 free each
    verdict = fit(nrt("a", [4, 3, 3, 0], policy="restricted"), {GPU: 8})
    assert verdict.reason == "no 2 NUMA nodes have 8 free GPUs (free: 4, 3, 3, 0)"


def test_cpus_count_for_a_guaranteed_pod_under_single_numa_node():
    obj = reserve(nrt("a", [4, 4], free_cpus=[8, 8]))
    unit = {GPU: 4, "cpu": 16000, "memory": 1 << 30}
    assert fit(obj, unit, guaranteed=False).fits  # no static CPU hint for a Burstable pod
    verdict = fit(obj, unit, guaranteed=True)
    assert verdict.reason == (
        "no NUMA node has 4 GPUs, 16 CPUs and 1Gi memory free together "
        "(free per NUMA node: GPUs 4, 4; CPUs 8, 8; memory 1024Gi, 1024Gi)"
    )


@pytest.mark.parametrize("policy", ["none", "best-effort"])
def test_kubelets_that_never_refuse_are_never_judged(policy):
    assert fit(nrt("a", [0, 0], policy=policy), {GPU: 4}).fits


def test_cpus_do_not_count_where_the_kubelet_reserves_none():
    # No CPU kept back: the CPU manager is `none` (static needs a reservation), no CPU hints.
    assert fit(nrt("a", [4, 4], free_cpus=[8, 8]), {GPU: 4, "cpu": 16000}, guaranteed=True).fits


def test_wider_than_one_numa_node_ever_is_refused_under_single_numa_node():
    verdict = fit(nrt("a", [4, 4]), {GPU: 8})
    assert not verdict.fits and verdict.reason == "8 GPUs need 2 NUMA nodes"


def test_restricted_refuses_resources_that_need_different_widths():
    obj = reserve(nrt("a", [4, 4], policy="restricted", scope="pod"))
    verdict = fit(obj, {GPU: 8, "cpu": 16000}, guaranteed=True)
    assert not verdict.fits
    assert verdict.reason == (
        "8 GPUs span 2 NUMA nodes but 16 CPUs fit in 1: no NUMA set is the narrowest for "
        "every resource"
    )
    assert fit(obj, {GPU: 8, "cpu": 100_000}, guaranteed=True).fits


def test_pod_scope_attribute_is_read():
    zones = zones_from_object(nrt("a", [4, 4], scope="pod"))
    assert zones.scope == "pod" and zones.policy == "single-numa-node"
    assert zones.free(GPU) == (4, 4)


def test_a_malformed_object_names_the_field():
    obj = nrt("a", [4, 4])
    obj["zones"][1]["resources"][2]["available"] = "lots"
    with pytest.raises(ZoneError, match=r"a: zones\[1\].resources\[2\]"):
        zones_from_object(obj)


def _memory_used_on_node_0(obj, used=64 << 30):
    for item in obj["zones"][0]["resources"]:
        if item["name"] == "memory":
            item["available"] = str(int(item["available"]) - used)
    return obj


@pytest.mark.parametrize("policy", ["best-effort", "restricted"])
def test_memory_across_numa_nodes_is_refused_where_one_already_holds_memory(policy):
    """make cluster (kubelet v1.37.2, Static memory manager): with a pod holding 64Gi on NUMA
    node 0 alone, a pod whose memory needs NUMA nodes 0 and 1 is refused, under best-effort
    at allocation (UnexpectedAdmissionError) as under restricted."""
    zones = _memory_used_on_node_0(reserve(nrt("a", [4, 4], policy=policy, scope="pod")))
    wide = {GPU: 8, "cpu": 100_000, "memory": 1200 << 30}  # 1200Gi over 1024Gi NUMA nodes
    verdict = fit(zones, wide, guaranteed=True)
    assert not verdict.fits
    assert "NUMA nodes holding memory join no other set" in (verdict.reason or "") or (
        "no 2 NUMA nodes have" in (verdict.reason or "")
    )
    # On an untouched node the same pod is placed, and a pod within one NUMA node still is.
    assert fit(reserve(nrt("b", [4, 4], policy=policy, scope="pod")), wide, guaranteed=True).fits
    narrow = {GPU: 2, "cpu": 10_000, "memory": 100 << 30}
    assert fit(zones, narrow, guaranteed=True).fits
