"""The topology model: discovery's only output, built by one pure step from the sources' facts.

Sockets, NUMA nodes with CPU lists and memory, GPUs and RDMA NICs with their place in the
PCIe tree, the GPU×NIC link matrix and a maximum GPU↔NIC pairing over PIX/PXB links. Labels,
the annotation and the table are all derived from this and nothing else.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from agent.discovery.links import Place, classify, link_rank
from agent.discovery.matching import maximum_matching
from agent.sources.cpu import CpuInfo, format_cpulist
from agent.sources.kubelet import KubeletFiles
from agent.sources.nic import IbPort, NicInventory
from agent.sources.nvml import NvmlInfo
from agent.sources.pci import PciDevice, PciInventory

__all__ = [
    "PAIRABLE_LINKS",
    "Gpu",
    "Nic",
    "NumaNode",
    "Socket",
    "Topology",
    "build_topology",
    "place_of",
]

log = logging.getLogger(__name__)

# Links good enough for GPUDirect RDMA pairing (NCCL's default NET_GDR_LEVEL reaches PXB).
PAIRABLE_LINKS = frozenset({"PIX", "PXB"})


@dataclass(frozen=True, slots=True)
class Socket:
    id: int
    cpus: frozenset[int]
    cores: int  # physical cores (thread-sibling groups) on this package


@dataclass(frozen=True, slots=True)
class NumaNode:
    id: int
    cpus: frozenset[int]
    memory_kib: int | None = None  # MemTotal of its meminfo; None when unreadable


@dataclass(frozen=True, slots=True)
class Gpu:
    index: int  # nvidia-smi's order: by PCI address
    bdf: str
    device_id: int
    place: Place
    product: str | None = None  # from NVML only
    uuid: str | None = None
    memory_bytes: int | None = None
    nvlinks: int | None = None
    # NVML's NUMA node of the GPU's own memory (a Grace HBM node): where its memory is, never
    # where it attaches — place.numa_node is that.
    memory_numa: int | None = None


@dataclass(frozen=True, slots=True)
class Nic:
    index: int  # natural order of RDMA names, as nvidia-smi's NIC legend
    name: str
    bdf: str
    place: Place
    netdevs: tuple[str, ...] = ()
    ports: tuple[IbPort, ...] = ()


@dataclass(frozen=True, slots=True)
class Topology:
    online_cpus: frozenset[int]
    sockets: tuple[Socket, ...]
    numa_nodes: tuple[NumaNode, ...]  # every node the kernel lists, memory-only ones included
    gpus: tuple[Gpu, ...]
    nics: tuple[Nic, ...]
    links: tuple[tuple[str, ...], ...]  # links[gpu.index][nic.index]
    pairs: Mapping[int, int]  # gpu index -> nic index, a maximum matching over PAIRABLE_LINKS
    kubelet: KubeletFiles = field(default_factory=KubeletFiles)
    datasets: Mapping[str, str] = field(default_factory=dict)  # name -> newest complete version
    nvml_reason: str | None = None  # why NVML added nothing; None when it answered
    # RDMA device-plugin resource -> PCI addresses of the NICs it holds (from the kubelet's
    # PodResources); None when the kubelet was not asked or did not answer.
    rdma_resources: Mapping[str, tuple[str, ...]] | None = None

    def node_cpus(self, numa_node: int | None) -> frozenset[int]:
        """CPUs local to a device on `numa_node`: all online CPUs when unknown."""
        for node in self.numa_nodes:
            if node.id == numa_node:
                return node.cpus
        return self.online_cpus

    def as_dict(self) -> dict[str, Any]:
        """The annotation's document: plain JSON types, stable order."""
        return {
            "sockets": [
                {"id": s.id, "cpus": format_cpulist(s.cpus), "cores": s.cores} for s in self.sockets
            ],
            "numaNodes": [
                {
                    "id": n.id,
                    "cpus": format_cpulist(n.cpus),
                    **({"memoryKiB": n.memory_kib} if n.memory_kib is not None else {}),
                }
                for n in self.numa_nodes
            ],
            "gpus": [
                {
                    "pci": g.bdf,
                    "device": f"{g.device_id:04x}",
                    "numa": g.place.numa_node,
                    "switch": g.place.switch,
                    "rootComplex": g.place.root_complex,
                    **({"product": g.product} if g.product else {}),
                    **({"uuid": g.uuid} if g.uuid else {}),
                    **({"memoryBytes": g.memory_bytes} if g.memory_bytes is not None else {}),
                    **({"nvlinks": g.nvlinks} if g.nvlinks is not None else {}),
                    **({"memoryNuma": g.memory_numa} if g.memory_numa is not None else {}),
                }
                for g in self.gpus
            ],
            "nics": [
                {
                    "name": n.name,
                    "pci": n.bdf,
                    "numa": n.place.numa_node,
                    "switch": n.place.switch,
                    "rootComplex": n.place.root_complex,
                    "netdevs": list(n.netdevs),
                }
                for n in self.nics
            ],
            "gpuNicLinks": [list(row) for row in self.links],
            "gpuNicPairs": [[g, n] for g, n in sorted(self.pairs.items())],
            **(
                {
                    "rdmaResources": [
                        {"resource": name, "nics": list(nics)}
                        for name, nics in sorted(self.rdma_resources.items())
                    ]
                }
                if self.rdma_resources is not None
                else {}
            ),
        }


def _by_link(words: Sequence[str]) -> Callable[[int], tuple[int, int]]:
    """The sort key of NIC indices by their link word to one GPU, best first."""
    return lambda n: (link_rank(words[n]), n)


def place_of(device: PciDevice, single_node: int | None, close: int | None = None) -> Place:
    """Where `device` attaches: its own NUMA node from sysfs, else the machine's single node,
    else `close` (the one node of the CPUs NVML calls close). Discovery and the audit share it,
    so a device is placed the same way in labels and in an audit's table."""
    numa = device.numa_node if device.numa_node >= 0 else single_node
    if numa is None:
        numa = close
    return Place(
        root_complex=device.root_complex,
        ancestors=device.ancestors,
        switch=device.switch,
        numa_node=numa,
    )


def _close_node(cpu: CpuInfo, affinity: frozenset[int] | None) -> int | None:
    """The one NUMA node with CPUs that holds NVML's close CPUs, or None. A firmware that
    gives a Grace root complex no proximity domain leaves `numa_node` at -1; the CPUs NVML
    calls close still say where the GPU attaches (its own memory's node would not)."""
    if not affinity:
        return None
    nodes = [n for n, cpus in cpu.numa_nodes.items() if cpus & affinity]
    return nodes[0] if len(nodes) == 1 else None


def _sockets(cpu: CpuInfo) -> tuple[Socket, ...]:
    return tuple(
        Socket(id=pkg, cpus=cpus, cores=sum(1 for core in cpu.cores if core & cpus))
        for pkg, cpus in cpu.packages.items()
    )


def build_topology(
    *,
    cpu: CpuInfo,
    pci: PciInventory,
    nics: NicInventory,
    nvml: NvmlInfo,
    kubelet: KubeletFiles,
    datasets: Mapping[str, str],
) -> Topology:
    # numa_node -1 on a machine with a single NUMA node can only mean that node.
    single_node = next(iter(cpu.numa_nodes)) if len(cpu.numa_nodes) == 1 else None
    gpus: list[Gpu] = []
    for device in pci.gpus():
        if device.virtual_function:
            continue  # a vGPU/SR-IOV function is not another physical GPU
        extra = nvml.gpus.get(device.bdf)
        gpus.append(
            Gpu(
                index=len(gpus),
                bdf=device.bdf,
                device_id=device.device,
                place=place_of(
                    device, single_node, _close_node(cpu, extra.cpu_affinity if extra else None)
                ),
                product=extra.name if extra else None,
                uuid=extra.uuid if extra else None,
                memory_bytes=extra.memory_bytes if extra else None,
                nvlinks=extra.nvlinks if extra else None,
                memory_numa=extra.numa_node_id if extra else None,
            )
        )
    nic_list: list[Nic] = []
    for rdma in nics.rdma:
        function = pci.devices.get(rdma.bdf)
        if function is None:
            log.warning(
                "skipping RDMA device %s: its PCI function %s was not read", rdma.name, rdma.bdf
            )
            continue
        nic_list.append(
            Nic(
                index=len(nic_list),
                name=rdma.name,
                bdf=rdma.bdf,
                place=place_of(function, single_node),
                netdevs=rdma.netdevs,
                ports=rdma.ports,
            )
        )
    links = tuple(tuple(classify(g.place, n.place) for n in nic_list) for g in gpus)
    pairable = [[n for n, word in enumerate(row) if word in PAIRABLE_LINKS] for row in links]
    # Best links first, so the pairing prefers a GPU's PIX NIC over a PXB one.
    for g, row in enumerate(pairable):
        row.sort(key=_by_link(links[g]))
    return Topology(
        online_cpus=cpu.online,
        sockets=_sockets(cpu),
        numa_nodes=tuple(
            NumaNode(id=n, cpus=c, memory_kib=cpu.numa_memory_kib.get(n))
            for n, c in cpu.numa_nodes.items()
        ),
        gpus=tuple(gpus),
        nics=tuple(nic_list),
        links=links,
        pairs=maximum_matching(pairable),
        kubelet=kubelet,
        datasets=dict(datasets),
        nvml_reason=nvml.reason,
    )
