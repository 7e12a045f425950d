"""The agent's NodeResourceTopology on real kubelets: the CRD takes it, its available counts
equal the kubelet's PodResources after every start and stop, nothing is written while
nothing changes, and a burst of 50 starts and stops costs at most one write a second."""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable
from typing import Any

from e2e import procs
from e2e.cluster import Cluster
from e2e.kube import Kubectl
from tests.e2e.nrt_truth import (
    agent_nrt_writes_metric,
    kubelet_free,
    nrt_writes,
    plain_pod,
    published,
)

NODE = "dgx-h100-b"
# A pod event is followed by reads at +1, +3 and +7 s; past that the agent only rechecks
# (every --resync-interval, 60 s), and a recheck of an unchanged node writes nothing.
QUIET = 12.0


def wait_true(cluster: Cluster, kubectl: Kubectl, what: str, timeout: float = 20) -> None:
    """Until the published counts equal the kubelet's, naming both when they never do."""
    seen: dict[str, Any] = {}

    def agree() -> bool:
        seen["nrt"], seen["kubelet"] = published(kubectl, NODE), kubelet_free(cluster, NODE)
        return seen["nrt"] == seen["kubelet"]

    try:
        procs.wait_for(agree, f"NodeResourceTopology {NODE} true {what}", timeout=timeout)
    except TimeoutError as exc:
        mismatch = f"published {seen['nrt']} != kubelet {seen['kubelet']}"
        raise AssertionError(f"{what}: {mismatch}") from exc


def assert_quiet(cluster: Cluster, seconds: float = QUIET) -> None:
    """No write in a window of `seconds` (an observation window, not a synchronisation)."""
    before = len(nrt_writes(cluster, NODE))
    try:
        procs.wait_for(lambda: len(nrt_writes(cluster, NODE)) != before, "a write",
                       timeout=seconds, interval=0.5)  # fmt: skip
    except TimeoutError:
        return
    raise AssertionError(f"the agent wrote NodeResourceTopology {NODE} while nothing changed")


def running(kubectl: Kubectl, namespace: str, name: str) -> None:
    procs.wait_for(
        lambda: (
            kubectl.json("get", "pod", name, "-n", namespace)["status"].get("phase") == "Running"
        ),
        f"{namespace}/{name} Running",
    )


def gone(kubectl: Kubectl, namespace: str, name: str) -> None:
    kubectl("delete", "pod", name, "-n", namespace, "--wait=true", "--timeout=60s")


def test_the_objects_stay_true_after_every_start_and_stop(
    cluster: Cluster, kubectl: Kubectl, namespace: str, create: Callable[..., Any]
) -> None:
    wait_true(cluster, kubectl, "before anything starts")
    obj = kubectl.json("get", "noderesourcetopology", NODE)
    assert obj["metadata"]["ownerReferences"][0]["kind"] == "Node"
    attributes = {a["name"]: a["value"] for a in obj["attributes"]}
    assert attributes == {"topologyManagerPolicy": "restricted", "topologyManagerScope": "pod"}
    assert [(z["name"], z["type"]) for z in obj["zones"]] == [("node-0", "Node"),
                                                              ("node-1", "Node")]  # fmt: skip
    assert_quiet(cluster)
    # Counted from here: an agent restarted by an earlier scenario starts its counter at 0.
    metric_before = agent_nrt_writes_metric(kubectl, NODE)
    audited_before = len(nrt_writes(cluster, NODE))

    steps = [("one", 1, 4), ("two", 2, 6), ("three", 1, 2)]
    for name, gpus, cpus in steps:
        create(plain_pod(name, NODE, gpus=gpus, cpus=cpus), namespace)
        running(kubectl, namespace, name)
        wait_true(cluster, kubectl, f"after {name} started")
    held = sum(g for _, g, _ in steps)
    free = published(kubectl, NODE)
    assert free is not None
    assert sum(z["nvidia.com/gpu"] for z in free.values()) == 8 - held
    for name, _, _ in steps:
        gone(kubectl, namespace, name)
        wait_true(cluster, kubectl, f"after {name} stopped")
    free = published(kubectl, NODE)
    assert free is not None and [z["nvidia.com/gpu"] for z in free.values()] == [4, 4]
    assert_quiet(cluster)
    metric = agent_nrt_writes_metric(kubectl, NODE) - metric_before
    assert metric == len(nrt_writes(cluster, NODE)) - audited_before > 0


def test_under_load_50_starts_and_stops_at_most_one_write_a_second(
    cluster: Cluster, kubectl: Kubectl, namespace: str
) -> None:
    wait_true(cluster, kubectl, "before the burst")
    began = time.time()
    pods = [plain_pod(f"burst-{i}", NODE, cpus=1) for i in range(50)]
    kubectl.apply({"apiVersion": "v1", "kind": "List", "items": pods}, "-n", namespace)
    procs.wait_for(
        lambda: (
            sum(
                p["status"].get("phase") == "Running"
                for p in kubectl.json("get", "pods", "-n", namespace, "-l", "app=nrt-e2e")["items"]
            )
            == 50
        ),
        "50 pods Running",
        timeout=120,
    )
    kubectl.run("delete", "pods", "-n", namespace, "-l", "app=nrt-e2e", "--wait=true",
                "--timeout=120s", timeout=150)  # fmt: skip
    elapsed = time.time() - began
    wait_true(cluster, kubectl, "after the burst")
    writes = [t for t in nrt_writes(cluster, NODE) if t >= began]
    gaps = [b - a for a, b in itertools.pairwise(writes)]
    # The agent waits a full second after a write ends before the next: received times too.
    assert all(g >= 0.95 for g in gaps), gaps
    assert 2 <= len(writes) <= elapsed + 10, (len(writes), elapsed)
    print(f"50 starts, stops: {elapsed:.1f} s, {len(writes)} writes, min gap {min(gaps):.2f} s")
    assert_quiet(cluster)
