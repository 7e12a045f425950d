"""The simulated machines of `make cluster`: which sysfs fixture, how much memory, and what
each node's kubelet is told (its config file, and drop-ins in its --config-dir)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

__all__ = ["NODES", "SimulatedNode", "memory_kib"]


@dataclass(frozen=True)
class SimulatedNode:
    name: str
    machine: str  # a fixture of tests/agent/discovery/machines.py
    memory: str  # installed memory (a Kubernetes quantity): /proc/meminfo's MemTotal
    kubelet: dict[str, Any] = field(default_factory=dict)  # KubeletConfiguration fields
    dropins: dict[str, dict[str, Any]] = field(default_factory=dict)  # file name → fields


_UNITS = {"Ki": 1, "Mi": 1024, "Gi": 1024**2, "Ti": 1024**3}


def memory_kib(quantity: str) -> int:
    """A binary-suffixed memory quantity in KiB; ValueError naming the value otherwise."""
    for suffix, factor in _UNITS.items():
        if quantity.endswith(suffix) and quantity[: -len(suffix)].isdigit():
            return int(quantity[: -len(suffix)]) * factor
    raise ValueError(f"memory {quantity!r}: expected an integer with Ki, Mi, Gi or Ti")


_GPU_NODE = {
    "cpuManagerPolicy": "static",
    "topologyManagerPolicy": "restricted",
    "topologyManagerScope": "pod",
    "memoryManagerPolicy": "Static",
    "reservedSystemCPUs": "0,1",
}

NODES: tuple[SimulatedNode, ...] = (
    # Two equal DGX H100s: the dataset scenario needs a tie that only the cache breaks.
    SimulatedNode("dgx-h100-a", "dgx-h100", "2063937144Ki", dict(_GPU_NODE)),
    SimulatedNode("dgx-h100-b", "dgx-h100", "2063937144Ki", dict(_GPU_NODE)),
    # Its config file says `restricted`; the drop-in (as a node pool's tuning would) makes it
    # single-numa-node, so its labels are right only if the agent merges --config-dir as the
    # kubelet does.
    SimulatedNode(
        "dgx-a100-nps4",
        "dgx-a100",
        "1056323328Ki",
        dict(_GPU_NODE),
        {
            "50-numa.conf": {
                "topologyManagerPolicy": "single-numa-node",
                "topologyManagerPolicyOptions": {"prefer-closest-numa-nodes": "true"},
            }
        },
    ),
    SimulatedNode(
        "pcie-l40s",
        "pcie-l40s",
        "528161664Ki",
        {"cpuManagerPolicy": "static", "reservedSystemCPUs": "0"},
    ),
    SimulatedNode("cpu-vm", "vm", "32827840Ki", {}),
)
