"""Device-plugin IDs → this machine's GPUs and NICs (pure).

An ID resolves to a PCI function when it is a PCI address (`0000:18:00.0`, or `18:00.0` in
domain 0: the SR-IOV network plugin), a GPU UUID (`GPU-…`: the NVIDIA plugin, through NVML or
the driver's /proc files), an RDMA device name (`mlx5_3`), or, for a GPU resource, a bare
index (the NVIDIA plugin's `--device-id-strategy=index`, nvidia-smi's order = PCI order).
A DRA device is tried by its device name (`gpu-<index>` for the NVIDIA driver) and by the IDs
in its CDI names. What the function is decides the kind; an ID that resolves to nothing is a
GPU or a NIC by its resource name, with only the NUMA nodes the device plugin reported.
"""

from __future__ import annotations

import re
from collections.abc import Collection
from dataclasses import dataclass
from typing import Literal

from agent.discovery.links import Place
from agent.discovery.topology import Topology, place_of
from agent.sources.device_ids import DeviceIds
from agent.sources.nic import natural_key
from agent.sources.pci import PciInventory, is_bdf
from agent.sources.podresources import ClaimDevice

__all__ = ["DEFAULT_GPU_RESOURCES", "Held", "Resolver"]

DEFAULT_GPU_RESOURCES = ("nvidia.com/gpu",)
_SHORT_BDF = re.compile(r"[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]")
_DRA_GPU = re.compile(r"gpu-\d+")
_NETWORK_CLASS = 0x02  # PCI base class "network controller" (Ethernet 0x0200, IB 0x0207)

Kind = Literal["gpu", "nic", "other"]


@dataclass(frozen=True, slots=True)
class Held:
    """One device a container holds, as far as this machine can place it."""

    id: str
    resource: str
    kind: Kind
    bdf: str | None = None  # None: the ID names no PCI function here
    place: Place | None = None
    numa_node: int | None = None  # sysfs first, else the device plugin's single node
    gpu_index: int | None = None  # nvidia-smi index, for GPUs of this machine
    rdma_name: str | None = None
    virtual_function: bool = False
    plugin_numa: tuple[int, ...] = ()  # what the device plugin reported, for the record

    @property
    def label(self) -> str:
        """How the table names it: GPU2, mlx5_3, a PCI address, or the raw ID."""
        if self.gpu_index is not None:
            return f"GPU{self.gpu_index}"
        return self.rdma_name or self.bdf or self.id


class Resolver:
    def __init__(
        self,
        topology: Topology,
        pci: PciInventory,
        ids: DeviceIds,
        *,
        gpu_resources: Collection[str] = DEFAULT_GPU_RESOURCES,
    ) -> None:
        self._topo = topology
        self._pci = pci
        self._gpu_resources = frozenset(gpu_resources)
        cpu_nodes = [n.id for n in topology.numa_nodes if n.cpus]
        self._single_node = cpu_nodes[0] if len(cpu_nodes) == 1 else None
        self._gpus = {g.bdf: g for g in topology.gpus}
        self._uuids = dict(ids.gpu_uuids) | {g.uuid: g.bdf for g in topology.gpus if g.uuid}
        self._rdma = dict(ids.rdma)
        # Several RDMA names can share a function (never in practice): keep the first.
        self._rdma_by_bdf: dict[str, str] = {}
        for name in sorted(self._rdma, key=natural_key):
            self._rdma_by_bdf.setdefault(self._rdma[name], name)

    def is_gpu_resource(self, resource: str) -> bool:
        # nvidia.com/gpu.shared (time-slicing renames), nvidia.com/mig-1g.10gb, gpu.nvidia.com
        # (the DRA driver) are GPUs too.
        return (
            resource in self._gpu_resources
            or resource.startswith(("nvidia.com/gpu", "nvidia.com/mig-"))
            or resource == "gpu.nvidia.com"
        )

    def resolve_claim(self, claim: ClaimDevice) -> Held:
        """A DRA device: by its device name (`gpu-3` of the NVIDIA driver is index 3), else by
        the ID after `=` in one of its CDI names (`nvidia.com/gpu=GPU-…`)."""
        candidates = [claim.device, *(n.partition("=")[2] for n in claim.cdi_devices)]
        gpu_driver = self.is_gpu_resource(claim.driver)
        for candidate in filter(None, candidates):
            if gpu_driver and _DRA_GPU.fullmatch(candidate):
                candidate = candidate[4:]
            if self._bdf(candidate, claim.driver) is not None:
                return self.resolve(candidate, claim.driver, ())
        return self.resolve(claim.device, claim.driver, ())

    def _bdf(self, device_id: str, resource: str) -> str | None:
        text = device_id.strip()
        lowered = text.lower()
        if is_bdf(lowered):
            return lowered
        if _SHORT_BDF.fullmatch(lowered):
            return f"0000:{lowered}"
        if text in self._uuids:
            return self._uuids[text]
        if text in self._rdma:
            return self._rdma[text]
        if text.isdigit() and self.is_gpu_resource(resource):
            index = int(text)
            if index < len(self._topo.gpus):
                return self._topo.gpus[index].bdf
        return None

    def resolve(self, device_id: str, resource: str, plugin_numa: tuple[int, ...]) -> Held:
        single_plugin = plugin_numa[0] if len(plugin_numa) == 1 else None
        bdf = self._bdf(device_id, resource)
        device = self._pci.devices.get(bdf) if bdf else None
        if device is None:  # nothing on this machine's PCI bus answers to the ID
            kind: Kind = "other"
            if self.is_gpu_resource(resource) or device_id.startswith(("GPU-", "MIG-")):
                kind = "gpu"
            elif "rdma" in resource.lower() or "infiniband" in resource.lower():
                kind = "nic"
            return Held(
                id=device_id,
                resource=resource,
                kind=kind,
                numa_node=single_plugin,
                plugin_numa=plugin_numa,
            )
        place = place_of(device, self._single_node)
        gpu = self._gpus.get(device.bdf)
        rdma_name = self._rdma_by_bdf.get(device.bdf)
        if gpu is not None or device.is_nvidia_gpu:
            kind = "gpu"
        elif rdma_name is not None or device.pci_class >> 16 == _NETWORK_CLASS:
            kind = "nic"
        else:
            kind = "other"
        return Held(
            id=device_id,
            resource=resource,
            kind=kind,
            bdf=device.bdf,
            place=place,
            numa_node=place.numa_node if place.numa_node is not None else single_plugin,
            gpu_index=gpu.index if gpu is not None else None,
            rdma_name=rdma_name,
            virtual_function=device.virtual_function,
            plugin_numa=plugin_numa,
        )
