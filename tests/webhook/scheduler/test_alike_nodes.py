"""The extender at fleet size: alike nodes share one zones record in the cache and one
verdict per request, and every node still gets the answer a node-by-node judgement gives."""

from __future__ import annotations

from typing import Any

from tests.webhook.placement_model.nrt import nrt
from webhook.placement_model.free_now import FreeFit, free_fit
from webhook.placement_model.kubelet_admission import pod_units
from webhook.placement_model.zones import zones_from_object
from webhook.scheduler.extender import ExtenderArgs, filter_nodes, prioritize, score
from webhook.scheduler.nrt_cache import NrtCache

# Free GPUs per zone of the machine classes of a fleet: whole, half taken, full.
_MIX = ((4, 4), (0, 4), (0, 0), (4, 4, 4, 4))


def _fleet(count: int) -> NrtCache:
    cache = NrtCache()
    for i in range(count):
        cache.apply("ADDED", nrt(f"gpu-{i:05d}", _MIX[i % len(_MIX)]))
    return cache


def _pod(gpus: int, containers: int = 1) -> dict[str, Any]:
    limits = {"nvidia.com/gpu": str(gpus), "cpu": "8", "memory": "64Gi"}
    side = {"cpu": "100m", "memory": "64Mi"}
    spec = [{"name": "worker", "image": "x", "resources": {"limits": limits, "requests": limits}}]
    spec += [
        {"name": f"side-{i}", "image": "x", "resources": {"limits": side, "requests": side}}
        for i in range(1, containers)
    ]
    return {"metadata": {"name": "p"}, "spec": {"containers": spec}}


def test_alike_nodes_share_one_zones_record() -> None:
    cache = _fleet(400)
    distinct = {id(cache.zones[name].zones) for name in cache.zones}
    assert len(distinct) == len(_MIX)
    # A change gives the node its own counts; its neighbours keep theirs.
    cache.apply("MODIFIED", nrt("gpu-00000", (1, 4)))
    assert cache.zones["gpu-00000"].zones[0].available["nvidia.com/gpu"] == 1
    assert cache.zones["gpu-00004"].zones[0].available["nvidia.com/gpu"] == 4


def test_5000_names_and_20_containers_get_each_node_its_own_answer() -> None:
    cache = _fleet(5000)
    cache.apply("ADDED", nrt("gpu-odd", (3, 0), policy="restricted", scope="pod"))
    names = [*cache.zones, "no-nrt-node"]
    pod = _pod(4, containers=20)
    args = ExtenderArgs(pod, tuple(names))
    units = pod_units(pod["spec"])
    # Each class judged on an object of its own, outside the cache: what every node should get.
    by_class = [free_fit(zones_from_object(nrt("alone", free)), units) for free in _MIX]
    odd = free_fit(zones_from_object(nrt("alone", (3, 0), policy="restricted", scope="pod")), units)

    def expected(name: str) -> FreeFit | None:
        if name == "no-nrt-node":
            return None
        return odd if name == "gpu-odd" else by_class[int(name.rsplit("-", 1)[1]) % len(_MIX)]

    result = filter_nodes(args, cache.get)
    assert filter_nodes(args, cache.get, classes=cache.classes) == result  # the routes' way
    fits = {n for n in names if (v := expected(n)) is None or v.fits}
    assert set(result["NodeNames"]) == fits
    assert set(result["FailedNodes"]) == set(names) - fits
    assert {"gpu-odd", "gpu-00002"} <= set(result["FailedNodes"])
    assert "no-nrt-node" in result["NodeNames"]
    scores = {h["Host"]: h["Score"] for h in prioritize(args, cache.get)}
    assert prioritize(args, cache.get, classes=cache.classes) == prioritize(args, cache.get)
    for name in names:
        verdict = expected(name)
        assert scores[name] == score(verdict), name


def test_nodes_with_pods_pending_still_share_one_record_per_class() -> None:
    """100 pods bound to 100 alike nodes and not shown yet: the ledger's view of those nodes
    is one record, judged once, and each node gets what a node-by-node judgement gives."""
    from webhook.placement_model.free_now import less_taken
    from webhook.scheduler.accounting import Ledger

    cache = _fleet(400)
    ledger = Ledger(cache)
    cache.on_change = ledger.nrt_changed
    ledger.pods_listed([])
    pod = _pod(4)
    for i in range(100):
        bound = _pod(4)
        bound["metadata"].update(name=f"b{i}", namespace="ml", uid=f"u{i}")
        bound["spec"]["nodeName"] = f"gpu-{4 * i:05d}"  # the (4, 4) class
        bound["status"] = {"phase": "Pending"}
        ledger.pod_event("ADDED", bound)
    assert len(ledger.overlay) == 100
    assert len({id(z.zones) for z in ledger.overlay.values()}) == 1
    names = tuple(cache.zones)
    result = filter_nodes(ExtenderArgs(pod, names), ledger.raw, ledger.stale, ledger.overlay)
    units = pod_units(pod["spec"])
    for name in names:
        zones = cache.zones[name]
        if name in ledger.overlay:
            taken = free_fit(zones, units).taken
            zones = less_taken(zones, [taken])
        assert (name in result["NodeNames"]) == free_fit(zones, units).fits, name
    zones = ledger.zones_of("gpu-00000")
    assert zones is not None and zones.free("nvidia.com/gpu") == (0, 4)  # NUMA node 0 taken


def test_the_class_keys_follow_every_change_of_the_objects() -> None:
    """The extender reads a node's class key from the cache, not from its zones: after
    changes and deletions each key still names the node's own counts."""
    cache = _fleet(8)
    cache.apply("MODIFIED", nrt("gpu-00000", (1, 4)))
    cache.apply("DELETED", nrt("gpu-00001", (0, 4)))
    cache.apply("MODIFIED", nrt("gpu-00002", (4, 4)))  # now alike the (4, 4) class

    def in_step() -> None:
        assert cache.classes.keys() == cache.zones.keys()
        for name, zones in cache.zones.items():
            assert cache.classes[name] == (id(zones.zones), zones.policy, zones.scope)

    in_step()
    assert cache.classes["gpu-00002"] == cache.classes["gpu-00004"]
    assert "gpu-00001" not in cache.classes
