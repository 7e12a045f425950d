"""A fleet of Nodes whose topoplace labels come from real discovery on real machine classes.

Each node is what `kubectl get node -o yaml` shows once topoplace-agent has run on it: the
sysfs tree of a machine class (tests/agent/discovery/machines.py), the node's kubelet config
and dataset cache, read by the agent's own discovery; allocatable as a kubelet with the
NVIDIA and RDMA device plugins reports it. Where a spec says which NICs the RDMA device
plugin's resource holds (`rdma_resource`), the node also carries the agent's
`topoplace.io/topology` annotation with that PodResources answer, which GPU↔NIC pairs are
judged from (docs/policies.md, "What each path guarantees"). `docs/examples/nodes.yaml` is
this fleet written out (tests/docs/test_troubleshooting_doc.py keeps the two equal); regenerate
it with
`python -m tests.webhook.nodefit.fleet > docs/examples/nodes.yaml`.
"""

from __future__ import annotations

import json
import sys
import tempfile
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import yaml

from agent.discovery.discover import DiscoveryOptions, discover
from agent.discovery.labels import derive_labels, topology_annotations
from agent.discovery.rdma_resources import compute_nics
from common.cache_layout import marker_path
from tests.agent.discovery.machines import build

__all__ = ["FLEET", "NodeSpec", "fleet", "node_object"]

GPU = "nvidia.com/gpu"
RDMA = "rdma/ib"


@dataclass(frozen=True)
class NodeSpec:
    name: str
    machine: str | None  # None: topoplace-agent never ran there
    cpu: int
    memory_gi: int
    topology_manager: str | None = None  # None: no readable kubelet config
    datasets: dict[str, str] = field(default_factory=dict)
    taints: tuple[dict[str, str], ...] = ()
    unschedulable: bool = False
    # Which RDMA NICs rdma/ib holds, as the kubelet's PodResources tells the agent: "compute"
    # (the GPUs' partner NICs only), "all" (storage NICs too); None: the agent could not ask.
    rdma_resource: str | None = None


_FULL = "restricted"
FLEET: tuple[NodeSpec, ...] = (
    NodeSpec(
        "dgx-h100-a",
        "dgx-h100",
        224,
        2000,
        _FULL,
        {"imagenet": "2024-06"},
        rdma_resource="compute",
    ),
    NodeSpec(
        "dgx-h100-b",
        "dgx-h100",
        224,
        2000,
        _FULL,
        {"imagenet": "2023-11"},
        rdma_resource="all",
    ),
    NodeSpec("hgx-h100-a", "hgx-h100", 192, 1800, "single-numa-node"),
    NodeSpec("hgx-a800-a", "hgx-a800", 128, 1000, "best-effort"),
    NodeSpec("dgx-a100-a", "dgx-a100", 256, 1000, _FULL),
    NodeSpec("pcie-l40s-a", "pcie-server", 64, 500, "none"),
    NodeSpec("pcie-l40s-b", "pcie-server", 64, 500, "single-numa-node"),
    NodeSpec("workstation-a", "workstation", 16, 120, "single-numa-node"),
    NodeSpec("hyperv-gpu-a", "hyperv-gpu-vm", 32, 220),
    NodeSpec("cpu-vm-a", "vm", 8, 30, "single-numa-node"),
    NodeSpec("fresh-gpu-a", None, 224, 2000),
    NodeSpec(
        "dgx-h100-tainted",
        "dgx-h100",
        224,
        2000,
        _FULL,
        taints=({"key": "maintenance", "value": "firmware", "effect": "NoSchedule"},),
    ),
)


def _discovered(spec: NodeSpec, scratch: Path) -> tuple[dict[str, str], dict[str, str]]:
    """The node's topoplace labels, and its annotations where the agent read PodResources."""
    if spec.machine is None:
        return {}, {}
    root = scratch / "machines" / spec.machine
    if not root.exists():  # one sysfs tree per machine class: building one takes seconds
        build(spec.machine, root)
    kubelet = None
    if spec.topology_manager is not None:
        kubelet = scratch / spec.name / "kubelet.yaml"
        kubelet.parent.mkdir(parents=True, exist_ok=True)
        policy = {"cpuManagerPolicy": "static", "topologyManagerPolicy": spec.topology_manager}
        kubelet.write_text(yaml.safe_dump({"kind": "KubeletConfiguration", **policy}))
    cache = scratch / spec.name / "datasets"
    for name, version in spec.datasets.items():
        marker = marker_path(cache, name, version)
        marker.parent.mkdir(parents=True)
        marker.write_text(json.dumps({"completed_at": "2026-11-01T00:00:00Z"}))
    options = DiscoveryOptions(
        sysfs_root=root, dataset_root=cache, kubelet_config=kubelet, use_nvml=False
    )
    found = discover(options)
    if spec.rdma_resource is None:
        return dict(found.labels), {}
    topo = found.topology
    held = compute_nics(topo) if spec.rdma_resource == "compute" else {n.bdf for n in topo.nics}
    topo = replace(topo, rdma_resources={RDMA: tuple(sorted(held))})
    labels = {**found.labels, **derive_labels(topo)}
    return dict(sorted(labels.items())), topology_annotations(topo)


def node_object(
    spec: NodeSpec, topoplace_labels: dict[str, str], annotations: dict[str, str] | None = None
) -> dict[str, Any]:
    gpus = int(topoplace_labels.get("topoplace.io/gpus", "0"))
    nics = int(topoplace_labels.get("topoplace.io/rdma-nics", "0"))
    if annotations:  # the RDMA device plugin offers the NICs its resource holds
        topo = json.loads(next(iter(annotations.values())))
        nics = len(topo["rdmaResources"][0]["nics"])
    if spec.machine is None:  # an 8-GPU node the agent has not labelled yet
        gpus, nics = 8, 8
    allocatable = {
        "cpu": str(spec.cpu - 2),  # the kubelet reserves system CPUs
        "memory": f"{spec.memory_gi - 8}Gi",
        "ephemeral-storage": "1700Gi",
        "pods": "110",
    }
    if gpus:
        allocatable[GPU] = str(gpus)
    if nics:
        allocatable[RDMA] = str(nics)
    node: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": spec.name,
            "labels": {
                "kubernetes.io/arch": "amd64",
                "kubernetes.io/hostname": spec.name,
                "kubernetes.io/os": "linux",
                **topoplace_labels,
            },
        },
        "spec": {},
        "status": {"allocatable": allocatable, "capacity": dict(allocatable)},
    }
    if annotations:
        node["metadata"]["annotations"] = dict(annotations)
    if spec.taints:
        node["spec"]["taints"] = [dict(t) for t in spec.taints]
    if spec.unschedulable:
        node["spec"]["unschedulable"] = True
    return node


def fleet(specs: tuple[NodeSpec, ...] = FLEET) -> list[dict[str, Any]]:
    with tempfile.TemporaryDirectory(prefix="topoplace-fleet-") as tmp:
        return [node_object(s, *_discovered(s, Path(tmp))) for s in specs]


def as_list(nodes: list[dict[str, Any]]) -> dict[str, Any]:
    """The nodes as `kubectl get nodes -o yaml` prints them: one List."""
    return {"apiVersion": "v1", "kind": "List", "items": nodes}


if __name__ == "__main__":
    sys.stdout.write(
        "# Generated by `python -m tests.webhook.nodefit.fleet`: real discovery on real machine\n"
        "# classes (tests/agent/discovery/machines.py). Do not edit by hand.\n"
    )
    yaml.safe_dump(as_list(fleet()), sys.stdout, sort_keys=False)
