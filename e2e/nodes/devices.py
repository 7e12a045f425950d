"""What the node's device plugins advertise, from the same sysfs tree the agent reads.

`nvidia.com/gpu`: one device per GPU, ID = its index in PCI order (the NVIDIA plugin's
`--device-id-strategy=index`). `rdma/ib`: one device per RDMA PCI function, ID = its PCI
address. Each with its NUMA node, which becomes the device's TopologyInfo and so the Topology
Manager's hints.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from agent.discovery.discover import DiscoveryOptions, discover

__all__ = ["GPU_RESOURCE", "RDMA_RESOURCE", "device_plugins"]

GPU_RESOURCE = "nvidia.com/gpu"
RDMA_RESOURCE = "rdma/ib"


def _numa(node: int | None) -> int:
    return -1 if node is None else node


def device_plugins(sysfs: Path) -> dict[str, Any]:
    """The `--devices` file of the node's runtime process (e2e/go/kubernetes/node)."""
    topo = discover(DiscoveryOptions(sysfs_root=sysfs, use_nvml=False)).topology
    gpus = [{"id": str(g.index), "numa": _numa(g.place.numa_node)} for g in topo.gpus]
    nics: dict[str, dict[str, Any]] = {}
    for nic in sorted(topo.nics, key=lambda n: n.bdf):
        nics.setdefault(nic.bdf, {"id": nic.bdf, "numa": _numa(nic.place.numa_node)})
    resources = [
        {"resource": GPU_RESOURCE, "env": "NVIDIA_VISIBLE_DEVICES", "devices": gpus},
        {"resource": RDMA_RESOURCE, "env": "RDMA_VISIBLE_DEVICES", "devices": list(nics.values())},
    ]
    return {"resources": [r for r in resources if r["devices"]]}
