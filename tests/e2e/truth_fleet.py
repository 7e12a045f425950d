"""The machines of the kubelet-truth scenario: the default fleet's GPU nodes, three more
added with the kubelet configurations it lacks, three with NUMA nodes without CPUs (a GB200
tray and a GH200 in NUMA mode, a CXL server; docs/memory-only-numa.md), and the holder pods
that leave some of them fragmented. Each node's *holder-only state* (its NodeResourceTopology
once it shows the holders) is what every random pod is judged against, and what it must
return to after."""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from e2e import procs
from e2e.cluster import Cluster, load
from e2e.kube import Kubectl
from tests.agent.discovery import machines
from tests.agent.discovery.machines import DGX_A100_MEMORY, DGX_H100_MEMORY
from tests.e2e.helpers import cluster_cli
from tests.e2e.nrt_truth import kubelet_free, published
from tests.e2e.random_pods import GI, GPU, IMAGE, RDMA, NodeShape, ZoneShape
from tests.e2e.truth_judges import Available, available, kubelet_config, kubelet_outcome

__all__ = ["ADDED", "JUDGED", "added_nodes", "hold", "settled_states", "shapes"]


@dataclass(frozen=True)
class Added:
    name: str
    machine: str  # a fixture of tests/agent/discovery/machines.py
    memory_kib: int | None  # None: the sum of the tree's per-node meminfo
    kubelet: Mapping[str, Any]


_STATIC = {"cpuManagerPolicy": "static", "reservedSystemCPUs": "0,1"}
_RESTRICTED_POD = {"topologyManagerPolicy": "restricted", "topologyManagerScope": "pod"}


def _max_numa(n: int) -> dict[str, Any]:
    """The limit an aligning kubelet needs to start at all on `n` NUMA nodes."""
    return {"topologyManagerPolicyOptions": {"max-allowable-numa-nodes": str(n)}}


ADDED = (
    # The default fleet's H100s align per pod: this one container by container.
    Added(
        "truth-h100-ctr",
        "dgx-h100",
        DGX_H100_MEMORY,
        _STATIC
        | {
            "topologyManagerPolicy": "restricted",
            "topologyManagerScope": "container",
            "memoryManagerPolicy": "Static",
        },
    ),
    # NPS4 (8 NUMA nodes of 16 cores) under `restricted`, where the default A100 is
    # single-numa-node; no memory manager, so memory is not aligned at all.
    Added(
        "truth-a100-restr",
        "dgx-a100",
        DGX_A100_MEMORY,
        _STATIC
        | {
            "topologyManagerPolicy": "restricted",
            "topologyManagerScope": "pod",
        },
    ),
    # best-effort never refuses for topology: only the plain resource fit can.
    Added(
        "truth-l40s-be",
        "pcie-l40s",
        528161664,
        {
            "cpuManagerPolicy": "static",
            "reservedSystemCPUs": "0",
            "topologyManagerPolicy": "best-effort",
            "topologyManagerScope": "pod",
            "memoryManagerPolicy": "Static",
        },
    ),
    # 34 NUMA nodes, 32 of them without CPUs: the kubelet starts only with the limit raised,
    # and only without the Static memory manager (whose hint search never ends there).
    Added(
        "truth-gb200",
        "gb200-tray",
        None,
        _STATIC | _RESTRICTED_POD | _max_numa(34),
    ),
    # 9 NUMA nodes: the Grace, the H100's HBM (which the Static memory manager counts), and
    # 7 empty ones.
    Added(
        "truth-gh200",
        "gh200",
        None,
        _STATIC | _RESTRICTED_POD | _max_numa(9) | {"memoryManagerPolicy": "Static"},
    ),
    # A CXL expander as NUMA node 2, memory only, under single-numa-node.
    Added(
        "truth-cxl",
        "cxl-server",
        None,
        _STATIC
        | {
            "topologyManagerPolicy": "single-numa-node",
            "topologyManagerScope": "pod",
            "memoryManagerPolicy": "Static",
        },
    ),
)
# Where random pods go: every GPU node (the CPU-only VM has no NUMA node to judge).
JUDGED = ("dgx-h100-a", "dgx-h100-b", "dgx-a100-nps4", "pcie-l40s", *(a.name for a in ADDED))


@contextmanager
def added_nodes(cluster: Cluster, tmp: Path) -> Iterator[Cluster]:
    """The ADDED nodes, Ready and labelled, for the duration; the cluster record with them."""
    done: list[str] = []
    try:
        for node in ADDED:
            config = tmp / f"{node.name}.yaml"
            config.write_text(json.dumps(dict(node.kubelet)))
            sysfs = machines.build(node.machine, tmp / node.name / node.machine)
            memory = [] if node.memory_kib is None else ["--memory", f"{node.memory_kib}Ki"]
            added = cluster_cli(
                "add-node", node.name, "--sysfs", str(sysfs), *memory,
                "--kubelet-config", str(config),
            )  # fmt: skip
            assert added.returncode == 0, added.stdout + added.stderr
            print(added.stdout.strip().splitlines()[-1])  # "node … Ready and labelled in N s"
            done.append(node.name)
        yield load(cluster.state)
    finally:
        for name in done:
            cluster_cli("remove-node", name)


def _holder(name: str, gpus: int, cpus: int, memory_gi: int) -> dict[str, Any]:
    both = {"cpu": str(cpus), "memory": f"{memory_gi}Gi"} | ({GPU: str(gpus)} if gpus else {})
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": {"app": "kubelet-truth-holder"}},
        "spec": {
            "restartPolicy": "Never",
            "terminationGracePeriodSeconds": 1,
            "containers": [
                {
                    "name": "hold",
                    "image": IMAGE,
                    "resources": {"requests": both, "limits": dict(both)},
                }
            ],
        },
    }


# Guaranteed pods that take part of one NUMA node's GPUs (and CPUs), so what is free there
# differs from what the hardware holds: 1 of 4 GPUs and 70 CPUs left on an H100's NUMA node 0,
# 2 GPUs and 10 CPUs on the container-scope H100's, 1 of 2 on an A100 GPU NUMA node, 1 of 2
# on the best-effort L40S's, 1 of 2 GPUs and 30 CPUs on the GB200's Grace 0; CPUs and
# memory alone on the GH200's Grace.
HOLDERS = {
    "dgx-h100-b": _holder("hold-h100-b", 3, 40, 200),
    "truth-h100-ctr": _holder("hold-h100-ctr", 2, 100, 64),
    "dgx-a100-nps4": _holder("hold-a100", 1, 4, 16),
    "truth-a100-restr": _holder("hold-a100-restr", 1, 8, 32),
    # Its memory is a single-NUMA allocation of the Static memory manager on NUMA node 0,
    # which that manager then never joins into a multi-NUMA one: best-effort or not.
    "truth-l40s-be": _holder("hold-l40s-be", 1, 4, 16),
    "truth-gb200": _holder("hold-gb200", 1, 40, 64),
    # Its memory pinned on the Grace alone: the Static memory manager then never joins the
    # Grace and the HBM node into one set for another pod.
    "truth-gh200": _holder("hold-gh200", 0, 16, 64),
}


def _settled(cluster: Cluster, kubectl: Kubectl, node: str) -> bool:
    """The published object agrees with the kubelet's own PodResources: GPUs and NICs always,
    CPUs where the static CPU manager hands them out (elsewhere PodResources lists none)."""
    compared = [GPU, RDMA]
    if kubelet_config(cluster, node).get("cpuManagerPolicy") == "static":
        compared.append("cpu")
    mine, theirs = published(kubectl, node), kubelet_free(cluster, node)
    if mine is None:
        return False
    return all(
        mine.get(zone, {}).get(r, 0) == theirs.get(zone, {}).get(r, 0)
        for zone in set(mine) | set(theirs)
        for r in compared
    )


def hold(cluster: Cluster, kubectl: Kubectl, namespace: str) -> dict[str, Available]:
    """Start the holders, and return each judged node's holder-only state."""
    for node, pod in HOLDERS.items():
        bound = json.loads(json.dumps(pod))
        bound["spec"]["nodeName"] = node
        kubectl("create", "-n", namespace, "-f", "-", input=json.dumps(bound))
    for node, pod in HOLDERS.items():
        verdict = kubelet_outcome(kubectl, namespace, pod["metadata"]["name"])
        assert verdict.fits, f"holder on {node}: {verdict}"
    return settled_states(cluster, kubectl)


def settled_states(cluster: Cluster, kubectl: Kubectl) -> dict[str, Available]:
    """Each judged node's NodeResourceTopology once it shows what its kubelet holds."""
    states = {}
    for node in JUDGED:
        procs.wait_for(
            lambda node=node: _settled(cluster, kubectl, node),
            f"NodeResourceTopology {node} showing what its kubelet holds",
            timeout=60,
            interval=0.5,
        )
        state = available(kubectl, node)
        assert state is not None
        states[node] = state
    return states


def shapes(kubectl: Kubectl) -> list[NodeShape]:
    """Each judged node's NUMA nodes as its NodeResourceTopology's allocatable counts."""
    out = []
    for node in JUDGED:
        obj = kubectl.json("get", "noderesourcetopology", node)
        zones = []
        for zone in sorted(obj["zones"], key=lambda z: int(z["name"].rsplit("-", 1)[-1])):
            alloc = {r["name"]: int(r["allocatable"]) for r in zone.get("resources") or []}
            zones.append(
                ZoneShape(
                    alloc.get("cpu", 0),
                    alloc.get("memory", 0),
                    alloc.get(GPU, 0),
                    alloc.get(RDMA, 0),
                )
            )
        out.append(NodeShape(node, tuple(zones)))
    assert all(s.total("memory") > GI for s in out), out
    return out
