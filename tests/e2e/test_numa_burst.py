"""Issue 45 on real kubelets: the pods of a burst, all for `topoplace-numa-scheduler`, arrive
together; the extender counts the ones it let through until the agent's NodeResourceTopology
shows them, so no kubelet refuses one.

Two DGX H100s whose kubelets run `single-numa-node`, scope `pod`, static CPU manager. The
kubelet gives a pod the lowest NUMA node with room, so fillers (plain pods) shape what is
free; the object the agent publishes is checked after each step, never assumed.

- three 2-GPU pods at once with 3 GPUs free on each NUMA node: one per NUMA node runs, the
  third waits (FailedScheduling, never bound), and starts once a running one is deleted;
- three Jobs of parallelism 3 (1, 2 and 4 GPUs per pod) at once across both nodes, left
  fragmented: no pod refused, every pod that can run runs, the rest wait and start as
  capacity frees.

Rounds: TOPOPLACE_E2E_BURST_ROUNDS (default 3) and TOPOPLACE_E2E_JOB_ROUNDS (default 10).
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from e2e import procs
from e2e.cluster import Cluster, load
from e2e.kube import Kubectl
from tests.agent.discovery import machines
from tests.e2e.helpers import cluster_cli, events, metric, patch_policies, training_pod
from tests.e2e.nrt_truth import plain_pod
from tests.e2e.test_numa_scheduler import SCHEDULER, delete, wait_free

NODES = ("numa-burst-a", "numa-burst-b")
BURST_ROUNDS = int(os.environ.get("TOPOPLACE_E2E_BURST_ROUNDS", "3"))
JOB_ROUNDS = int(os.environ.get("TOPOPLACE_E2E_JOB_ROUNDS", "10"))
POLICY = "numa-burst"
POLICIES = f"""\
apiVersion: topoplace.io/v1alpha1
kind: PlacementPolicy
metadata:
  name: {POLICY}
spec:
  placement:
    singleNumaNode: true
    topologyManagerPolicies: [single-numa-node]
    numaAwareScheduler: {SCHEDULER}
  resources:
    guaranteed: false
"""
KUBELET = (
    "cpuManagerPolicy: static\nreservedSystemCPUs: '0'\n"
    "topologyManagerPolicy: single-numa-node\ntopologyManagerScope: pod\n"
)
REFUSED = '{outcome="refused"}'


def pinned(obj: dict[str, Any], *nodes: str) -> dict[str, Any]:
    """Only our nodes (the default fleet has other GPU nodes)."""
    term = {"matchExpressions": [
        {"key": "kubernetes.io/hostname", "operator": "In", "values": list(nodes)}
    ]}  # fmt: skip
    spec = obj["spec"]["template"]["spec"] if obj["kind"] == "Job" else obj["spec"]
    spec["terminationGracePeriodSeconds"] = 1
    spec["affinity"] = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [term]}}}  # fmt: skip
    return obj


def job(name: str, gpus: int) -> dict[str, Any]:
    pod = training_pod(name, POLICY, gpus)
    return pinned({
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "labels": {"topoplace.io/policy": POLICY}},
        "spec": {"parallelism": 3, "completions": 3, "backoffLimit": 0,
                 "template": {"metadata": {"labels": pod["metadata"]["labels"]},
                              "spec": pod["spec"]}},
    }, *NODES)  # fmt: skip


def create_all(kubectl: Kubectl, objs: list[dict[str, Any]], ns: str) -> None:
    """One kubectl create for all: the objects arrive together."""
    body = {"apiVersion": "v1", "kind": "List", "items": objs}
    kubectl.run("create", "-n", ns, "-f", "-", input=json.dumps(body))


def fill(kubectl: Kubectl, ns: str, node: str, steps: list[tuple[str, int]]) -> None:
    """Plain pods, one at a time (each on the lowest NUMA node with room); gpus 0: delete."""
    for name, gpus in steps:
        if gpus == 0:
            delete(kubectl, ns, name)
            continue
        kubectl.run("create", "-n", ns, "-f", "-",
                    input=json.dumps(plain_pod(name, node, gpus=gpus)))  # fmt: skip
        procs.wait_for(
            lambda n=name: (
                kubectl.json("get", "pod", n, "-n", ns)["status"].get("phase") == "Running"
            ),
            f"{ns}/{name} Running",
        )


def states(kubectl: Kubectl, ns: str, selector: str) -> dict[str, tuple[str, str, str]]:
    """name -> (node, phase, reason) of the pods `selector` picks."""
    items = kubectl.json("get", "pods", "-n", ns, "-l", selector)["items"]
    return {
        p["metadata"]["name"]: (
            p["spec"].get("nodeName", ""),
            p["status"].get("phase", ""),
            p["status"].get("reason", ""),
        )
        for p in items
    }


def settled(kubectl: Kubectl, ns: str, selector: str, count: int, running: int = -1) -> Any:
    """The pods once each runs or waits unbound, turned away by the extender (`running` of
    them run, when given); fails at once on a refusal."""

    def look() -> dict[str, tuple[str, str, str]] | None:
        now = states(kubectl, ns, selector)
        refused = {n: s for n, s in now.items() if s[1] == "Failed"}
        assert not refused, f"refused by a kubelet: {refused}"
        up = [n for n, s in now.items() if s[1] == "Running"]
        waiting = [n for n, s in now.items() if not s[0]]
        if len(now) != count or len(up) + len(waiting) != count or running not in (-1, len(up)):
            return None
        if not all(events(kubectl, ns, n, "FailedScheduling") for n in waiting):
            return None
        return now

    return procs.wait_for(look, f"{count} pods running or waiting", timeout=90)


@contextlib.contextmanager
def burst_fleet(kubectl: Kubectl, tmp: Path) -> Iterator[str]:
    """The two DGX H100s under `single-numa-node` and a namespace; yields the namespace.
    Shared with the burst bench (benchmarks/e2e/bench_e2e_burst.py)."""
    config = tmp / "kubelet.yaml"
    config.write_text(KUBELET)
    sysfs = machines.build("dgx-h100", tmp / "sys")
    added = []
    ns = f"ml-e2e-burst-{secrets.token_hex(3)}"
    try:
        for node in NODES:
            done = cluster_cli(
                "add-node", node, "--sysfs", str(sysfs), "--memory", "2063937144Ki",
                "--kubelet-config", str(config),
            )  # fmt: skip
            assert done.returncode == 0, done.stdout + done.stderr
            added.append(node)
        kubectl("create", "namespace", ns)
        procs.wait_for(
            lambda: kubectl.run("get", "sa", "default", "-n", ns, check=False).returncode == 0,
            f"serviceaccount default in {ns}",
        )
        patch_policies(kubectl, {"numa-burst.yaml": POLICIES})
        yield ns
    finally:
        kubectl.run("delete", "namespace", ns, "--wait=false", check=False)
        patch_policies(kubectl, {"numa-burst.yaml": None}, wait=False)
        for node in added:
            cluster_cli("remove-node", node)


@pytest.fixture(scope="module")
def burst_nodes(
    cluster: Cluster, kubectl: Kubectl, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[str]:
    with burst_fleet(kubectl, tmp_path_factory.mktemp("burst")) as ns:
        yield ns


def test_three_two_gpu_pods_at_once_one_per_numa_node_and_the_third_waits(
    cluster: Cluster, kubectl: Kubectl, burst_nodes: str
) -> None:
    ns, node = burst_nodes, NODES[0]
    # 4 GPUs on NUMA node 0, 1 on node 1, the 4 gone, 1 more on node 0: 3 + 3 free.
    fill(kubectl, ns, node, [("a-big", 4), ("a-1", 1), ("a-big", 0), ("a-0", 1)])
    wait_free(cluster, kubectl, node, (3, 3))
    refused_before = metric(kubectl, "topoplace_webhook_scheduler_predictions_total", REFUSED)
    seen, started_s = [], []
    for r in range(BURST_ROUNDS):
        names = [f"burst-{r}-{i}" for i in range(3)]
        pods = [pinned(training_pod(n, POLICY, 2), node) for n in names]
        for p in pods:
            p["metadata"]["labels"]["round"] = str(r)
        create_all(kubectl, pods, ns)
        now = settled(kubectl, ns, f"round={r}", 3, 2)
        waiting = next(n for n, s in now.items() if not s[0])
        seen.append(sorted(s[1] for s in now.values()))
        # A running one goes: the waiting one starts on the NUMA node it frees.
        delete(kubectl, ns, next(n for n, s in now.items() if s[1] == "Running"))
        freed = time.monotonic()
        procs.wait_for(
            lambda w=waiting, r=r: (
                states(kubectl, ns, f"round={r}").get(w, ("", ""))[1] == "Running"
            ),
            f"{waiting} running once a NUMA node freed",
        )
        started_s.append(round(time.monotonic() - freed, 1))
        assert all(s[1] != "Failed" for s in states(kubectl, ns, f"round={r}").values())
        delete(kubectl, ns, *[n for n in names if n in states(kubectl, ns, f"round={r}")])
        wait_free(cluster, kubectl, node, (3, 3))
    print(
        f"\n{BURST_ROUNDS} bursts of three 2-GPU pods on 3 + 3 free GPUs: {seen}; "
        f"the waiting pod Running s after a running one was deleted: {started_s}"
    )
    refused = metric(kubectl, "topoplace_webhook_scheduler_predictions_total", REFUSED)
    assert refused == refused_before
    for name in ("a-0", "a-1"):
        delete(kubectl, ns, name)
    wait_free(cluster, kubectl, node, (4, 4))


def _gpus(name: str) -> int:
    return int(name.split("-")[1].removesuffix("gpu"))  # j<round>-<gpus>gpu-<suffix>


def _current(cluster: Cluster, kubectl: Kubectl) -> dict[str, tuple[int, ...]] | None:
    """GPUs free per NUMA node of each node, once the published objects say what the
    kubelets' PodResources say."""
    from tests.e2e.nrt_truth import kubelet_free
    from tests.e2e.test_numa_scheduler import free_gpus

    added = load(cluster.state)
    out = {}
    for node in NODES:
        truth = tuple(
            z.get("nvidia.com/gpu", 0) for _, z in sorted(kubelet_free(added, node).items())
        )
        if free_gpus(kubectl, node) != truth:
            return None
        out[node] = truth
    return out


def runs_what_can(cluster: Cluster, kubectl: Kubectl, ns: str, selector: str, count: int) -> int:
    """Every pod runs or waits unbound where no NUMA node has room for it; none refused.
    Returns how many run."""
    settled(kubectl, ns, selector, count)

    def no_room_left() -> bool | None:
        free = _current(cluster, kubectl)
        if free is None:
            return None
        waiting = [n for n, s in states(kubectl, ns, selector).items() if not s[0]]
        return all(max(f) < _gpus(n) for n in waiting for f in free.values()) or None

    procs.wait_for(no_room_left, "no waiting pod with room on a NUMA node", timeout=60)
    now = settled(kubectl, ns, selector, count)
    return sum(1 for s in now.values() if s[1] == "Running")


def test_three_jobs_at_once_across_two_fragmented_nodes_no_pod_refused(
    cluster: Cluster, kubectl: Kubectl, burst_nodes: str
) -> None:
    ns = burst_nodes
    a, b = NODES
    # a: 3 + 2 free, b: 2 + 3 free (10 GPUs; the Jobs ask 21, no NUMA node has 4).
    fill(kubectl, ns, a, [("fa-big", 4), ("fa-1", 2), ("fa-big", 0), ("fa-0", 1)])
    fill(kubectl, ns, b, [("fb-big", 4), ("fb-1", 1), ("fb-big", 0), ("fb-0", 2)])
    wait_free(cluster, kubectl, a, (3, 2))
    wait_free(cluster, kubectl, b, (2, 3))
    refused_before = metric(kubectl, "topoplace_webhook_scheduler_predictions_total", REFUSED)
    running, started_s, refusals = [], [], []
    for r in range(JOB_ROUNDS):
        jobs = [job(f"j{r}-{g}gpu", g) for g in (1, 2, 4)]
        create_all(kubectl, jobs, ns)
        selector = "job-name in ({})".format(",".join(j["metadata"]["name"] for j in jobs))
        first = runs_what_can(cluster, kubectl, ns, selector, 9)
        # Capacity frees: the 1-GPU Job goes; what waits and now fits starts.
        kubectl.run("delete", "job", f"j{r}-1gpu", "-n", ns, "--wait=true",
                    "--cascade=foreground", timeout=120)  # fmt: skip
        freed = time.monotonic()
        rest = f"job-name in (j{r}-2gpu,j{r}-4gpu)"
        then = runs_what_can(cluster, kubectl, ns, rest, 6)
        started_s.append(round(time.monotonic() - freed, 1))
        running.append((first, then))
        so_far = metric(kubectl, "topoplace_webhook_scheduler_predictions_total", REFUSED)
        refusals.append(int(so_far - refused_before - sum(refusals)))
        for g in (2, 4):
            kubectl.run("delete", "job", f"j{r}-{g}gpu", "-n", ns, "--wait=true",
                        "--cascade=foreground", timeout=120)  # fmt: skip
        wait_free(cluster, kubectl, a, (3, 2))
        wait_free(cluster, kubectl, b, (2, 3))
    print(f"\n{JOB_ROUNDS} rounds of three Jobs (3 pods of 1, 2, 4 GPUs) on 3+2 and 2+3 free: "
          f"running (of all 9, then of the 2- and 4-GPU Jobs' 6) {running}; refused per "
          f"round {refusals}; s from the 1-GPU Job gone to every pod with room Running "
          f"{started_s}")  # fmt: skip
    refused = metric(kubectl, "topoplace_webhook_scheduler_predictions_total", REFUSED)
    assert refused == refused_before
