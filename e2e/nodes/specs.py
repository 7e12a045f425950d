"""The simulated nodes: a machine's sysfs fixture, its kubelet config, and the Node object a
kubelet plus device plugins would register for it.

Capacity is what those components would count on that hardware: cpu from the online CPUs,
`nvidia.com/gpu` from the GPUs (NVIDIA device plugin), `rdma/ib` from the RDMA NICs (an RDMA
device plugin exposing one device per NIC). Both counts come from our discovery of the same
fixture, so a node's labels and its capacity describe one machine.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agent.discovery.discover import DiscoveryOptions, discover
from common.vocabulary import Label
from tests.agent.discovery import machines

__all__ = ["NODES", "SimulatedNode", "kubelet_config", "lay_out", "node_object"]

K8S_VERSION = "v1.37.2"


@dataclass(frozen=True)
class SimulatedNode:
    name: str
    machine: str  # a fixture of tests/agent/discovery/machines.py
    memory: str  # installed memory, as the kubelet reports it
    kubelet: dict[str, Any] = field(default_factory=dict)  # KubeletConfiguration fields
    address: str = "127.0.1.1"  # loopback range: data only, nothing dials it


_GPU_NODE = {
    "cpuManagerPolicy": "static",
    "topologyManagerPolicy": "restricted",
    "topologyManagerScope": "pod",
    "memoryManagerPolicy": "Static",
    "reservedSystemCPUs": "0,1",
}

NODES: tuple[SimulatedNode, ...] = (
    # Two equal DGX H100s: the dataset scenario needs a tie that only the cache breaks.
    SimulatedNode("dgx-h100-a", "dgx-h100", "2063937144Ki", dict(_GPU_NODE), "127.0.1.1"),
    SimulatedNode("dgx-h100-b", "dgx-h100", "2063937144Ki", dict(_GPU_NODE), "127.0.1.2"),
    SimulatedNode(
        "dgx-a100-nps4",
        "dgx-a100",
        "1056323328Ki",
        {**_GPU_NODE, "topologyManagerPolicy": "single-numa-node"},
        "127.0.1.3",
    ),
    SimulatedNode(
        "pcie-l40s",
        "pcie-l40s",
        "528161664Ki",
        {"cpuManagerPolicy": "static", "reservedSystemCPUs": "0"},
        "127.0.1.4",
    ),
    SimulatedNode("cpu-vm", "vm", "32827840Ki", {}, "127.0.1.5"),
)


def kubelet_config(node: SimulatedNode) -> str:
    doc = {"apiVersion": "kubelet.config.k8s.io/v1beta1", "kind": "KubeletConfiguration"}
    return json.dumps({**doc, **node.kubelet}, indent=2) + "\n"


@dataclass(frozen=True)
class NodePaths:
    sysfs: Path
    datasets: Path
    kubelet_config: Path


def lay_out(node: SimulatedNode, root: Path) -> NodePaths:
    """The node's host files under `root`: sysfs fixture, dataset cache, kubelet config."""
    paths = NodePaths(root / "sys", root / "datasets", root / "kubelet" / "config.yaml")
    machines.build(node.machine, paths.sysfs)
    paths.datasets.mkdir(parents=True, exist_ok=True)
    paths.kubelet_config.parent.mkdir(parents=True, exist_ok=True)
    paths.kubelet_config.write_text(kubelet_config(node))  # JSON is YAML
    return paths


def _quantity_ki(memory: str) -> int:
    assert memory.endswith("Ki"), memory
    return int(memory[:-2])


def node_object(node: SimulatedNode, paths: NodePaths) -> dict[str, Any]:
    found = discover(DiscoveryOptions(sysfs_root=paths.sysfs, use_nvml=False))
    cpus = len(found.topology.online_cpus)
    labels = found.labels
    gpus = int(labels.get(Label.GPUS, "0"))
    rdma = int(labels.get(Label.RDMA_NICS, "0"))
    capacity = {
        "cpu": str(cpus),
        "memory": node.memory,
        "pods": "110",
        "ephemeral-storage": "3750000000Ki",
        "hugepages-1Gi": "0",
        "hugepages-2Mi": "0",
    }
    if gpus:
        capacity["nvidia.com/gpu"] = str(gpus)
    if rdma:
        capacity["rdma/ib"] = str(rdma)
    reserved = node.kubelet.get("reservedSystemCPUs")
    reserved_cpus = len(str(reserved).split(",")) if reserved else 0
    allocatable = dict(capacity)
    allocatable["cpu"] = str(cpus - reserved_cpus)
    allocatable["memory"] = f"{_quantity_ki(node.memory) - 4 * 1024 * 1024}Ki"  # 4Gi reserved
    ready = {
        "type": "Ready",
        "status": "True",
        "reason": "KubeletReady",
        "message": "kubelet is posting ready status",
    }
    fine = [
        {"type": t, "status": "False", "reason": f"KubeletHas{r}", "message": "simulated"}
        for t, r in (
            ("MemoryPressure", "SufficientMemory"),
            ("DiskPressure", "NoDiskPressure"),
            ("PIDPressure", "SufficientPID"),
        )
    ]
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": node.name,
            "labels": {
                "kubernetes.io/hostname": node.name,
                "kubernetes.io/os": "linux",
                "kubernetes.io/arch": "amd64",
                "beta.kubernetes.io/os": "linux",
                "beta.kubernetes.io/arch": "amd64",
                "node.kubernetes.io/instance-type": node.machine,
            },
        },
        "spec": {},
        "status": {
            "capacity": capacity,
            "allocatable": allocatable,
            "conditions": [*fine, ready],
            "addresses": [
                {"type": "InternalIP", "address": node.address},
                {"type": "Hostname", "address": node.name},
            ],
            "nodeInfo": {
                "architecture": "amd64",
                "operatingSystem": "linux",
                "osImage": "Simulated by topoplace e2e",
                "kernelVersion": "6.8.0",
                "kubeletVersion": K8S_VERSION,
                "kubeProxyVersion": "",
                "containerRuntimeVersion": "containerd://2.1.0",
                "machineID": "",
                "systemUUID": "",
                "bootID": "",
            },
        },
    }
