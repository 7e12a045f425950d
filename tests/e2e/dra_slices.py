"""ResourceSlices and DeviceClasses for the simulated nodes, as two DRA drivers would publish
them: test fixtures only (the product never publishes slices for a driver it is not).

- NVIDIA's GPU DRA driver (`gpu.nvidia.com`): one device per GPU.
- dranet (`dra.net`): one device per RDMA NIC, with `rdma: true`.

Each device carries the standard attributes the DRA policies align on, taken from the node's
sysfs fixture through our own discovery (so the slices, the node's labels and its capacity
describe one machine): `resource.kubernetes.io/pcieRoot`, the PCIe root complex as
`pci<domain>:<bus>`, and `resource.kubernetes.io/numaNode` (an int; left out where sysfs
says -1 on a machine with several NUMA nodes, as a driver would). Attributes without a
domain belong to the driver's own (`device.attributes["dra.net"].rdma`).

Use: `kubectl apply` the objects of `device_classes()` once and `node_slices(name, sysfs)`
per node; after the scheduler allocated a claim, `allocated_pairs(claim, slices)` gives each
(gpu-i, nic-i) pair's attribute values, to assert they share the policy's `align` attribute.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from agent.discovery.discover import DiscoveryOptions, discover
from agent.discovery.topology import Topology

__all__ = [
    "GPU_CLASS",
    "GPU_DRIVER",
    "NIC_CLASS",
    "NIC_DRIVER",
    "NUMA_NODE",
    "PCIE_ROOT",
    "allocated_devices",
    "allocated_pairs",
    "device_classes",
    "node_slices",
    "resource_slices",
]

API_VERSION = "resource.k8s.io/v1"
GPU_DRIVER = "gpu.nvidia.com"
NIC_DRIVER = "dra.net"
# DeviceClass names, as the drivers' Helm charts name them (and docs/policies.md's example).
GPU_CLASS = "gpu.nvidia.com"
NIC_CLASS = "dranet"
PCIE_ROOT = "resource.kubernetes.io/pcieRoot"
NUMA_NODE = "resource.kubernetes.io/numaNode"


def device_classes() -> list[dict[str, Any]]:
    """One DeviceClass per driver, selecting its devices by driver name."""
    return [
        {
            "apiVersion": API_VERSION,
            "kind": "DeviceClass",
            "metadata": {"name": name},
            "spec": {"selectors": [{"cel": {"expression": f'device.driver == "{driver}"'}}]},
        }
        for name, driver in ((GPU_CLASS, GPU_DRIVER), (NIC_CLASS, NIC_DRIVER))
    ]


def node_slices(node_name: str, sysfs_root: Path, *, generation: int = 1) -> list[dict[str, Any]]:
    """The slices both drivers would publish on `node_name`, from its sysfs fixture."""
    found = discover(DiscoveryOptions(sysfs_root=sysfs_root, use_nvml=False))
    return resource_slices(node_name, found.topology, generation=generation)


def resource_slices(
    node_name: str, topology: Topology, *, generation: int = 1
) -> list[dict[str, Any]]:
    """One slice per driver with devices on the node (none for a node without any)."""
    gpus = [
        _device(
            f"gpu-{gpu.index}",
            gpu.place.root_complex,
            gpu.place.numa_node,
            {
                "type": {"string": "gpu"},
                "index": {"int": gpu.index},
                "pciBusID": {"string": gpu.bdf},
            },
        )
        for gpu in topology.gpus
    ]
    nics = [
        _device(
            _dns_label(nic.name),
            nic.place.root_complex,
            nic.place.numa_node,
            {
                "rdma": {"bool": True},
                "rdmaDevice": {"string": nic.name},
                "pciAddress": {"string": nic.bdf},
                **({"ifName": {"string": nic.netdevs[0]}} if nic.netdevs else {}),
            },
        )
        for nic in topology.nics
    ]
    slices = []
    for driver, devices in ((GPU_DRIVER, gpus), (NIC_DRIVER, nics)):
        if devices:
            slices.append(_slice(node_name, driver, devices, generation))
    return slices


def _device(
    name: str, root_complex: str, numa_node: int | None, own: dict[str, Any]
) -> dict[str, Any]:
    attributes: dict[str, Any] = {**own, PCIE_ROOT: {"string": root_complex}}
    if numa_node is not None:
        attributes[NUMA_NODE] = {"int": numa_node}
    return {"name": name, "attributes": attributes}


def _slice(
    node_name: str, driver: str, devices: list[dict[str, Any]], generation: int
) -> dict[str, Any]:
    return {
        "apiVersion": API_VERSION,
        "kind": "ResourceSlice",
        "metadata": {"name": f"{node_name}-{driver.replace('.', '-')}"},
        "spec": {
            "driver": driver,
            "nodeName": node_name,
            # One pool per node and driver, in one slice: as both drivers publish.
            "pool": {"name": node_name, "generation": generation, "resourceSliceCount": 1},
            "devices": devices,
        },
    }


def _dns_label(name: str) -> str:
    return name.lower().replace("_", "-").replace(".", "-")


def allocated_devices(claim: dict[str, Any]) -> dict[str, tuple[str, str, str]]:
    """A ResourceClaim's allocation: request name → (driver, pool, device)."""
    allocation = (claim.get("status") or {}).get("allocation") or {}
    results = (allocation.get("devices") or {}).get("results") or []
    return {r["request"]: (r["driver"], r["pool"], r["device"]) for r in results}


def allocated_pairs(
    claim: dict[str, Any], slices: list[dict[str, Any]], attribute: str = PCIE_ROOT
) -> list[tuple[Any, Any]]:
    """For every gpu-i/nic-i request pair of the claim, the two devices' `attribute` values
    (a value is None where the device has no such attribute)."""
    index: dict[tuple[str, str, str], dict[str, Any]] = {}
    for s in slices:
        spec = s["spec"]
        for device in spec["devices"]:
            index[(spec["driver"], spec["pool"]["name"], device["name"])] = device["attributes"]
    devices = allocated_devices(claim)

    def value(request: str) -> Any:
        attrs = index.get(devices[request], {})
        found = attrs.get(attribute)
        return next(iter(found.values())) if found else None

    gpus = sorted((r for r in devices if r.startswith("gpu-")), key=lambda r: int(r[4:]))
    return [(value(g), value(f"nic-{g[4:]}")) for g in gpus if f"nic-{g[4:]}" in devices]
