"""Which RDMA NICs each device-plugin resource holds, from what the kubelet says it offers.

Device plugins name RDMA devices in their own ways: by PCI address (the SR-IOV network
plugin, and this project's e2e plugins) or by RDMA device name (mlx5_0). A resource counts as
an RDMA resource only when every device ID it offers is one of this node's RDMA NIC
functions; GPUs, virtual functions and shared-device counters are not NICs to pair with.
"""

from __future__ import annotations

from collections.abc import Iterable

from agent.discovery.topology import Topology
from agent.sources.podresources import DeviceAssignment

__all__ = ["compute_nics", "rdma_resources"]


def compute_nics(topo: Topology) -> frozenset[str]:
    """PCI addresses of the NICs that are some GPU's partner (the rest: storage, management)."""
    return frozenset(topo.nics[n].bdf for n in topo.pairs.values())


def rdma_resources(
    topo: Topology, offered: Iterable[DeviceAssignment]
) -> dict[str, tuple[str, ...]]:
    """Resource name -> the PCI addresses of the NICs it holds, sorted; by name."""
    known = {n.bdf: n.bdf for n in topo.nics} | {n.name: n.bdf for n in topo.nics}
    ids: dict[str, set[str]] = {}
    for entry in offered:
        ids.setdefault(entry.resource_name, set()).update(entry.device_ids)
    found: dict[str, tuple[str, ...]] = {}
    for resource, names in sorted(ids.items()):
        held = [known.get(name, known.get(name.lower())) for name in names]
        if held and all(bdf is not None for bdf in held):
            found[resource] = tuple(sorted({bdf for bdf in held if bdf is not None}))
    return found
