"""Lay out a sysfs tree the way the kernel does, under any directory.

PCI functions live at `devices/pci<dom>:<bus>/<root-port>/<switch-up>/<switch-down>/…/<bdf>`
with their attribute files; `bus/pci/devices/<bdf>`, `class/infiniband/<name>`,
`class/net/<name>` and the `device`/`physfn`/`subsystem` links are relative symlinks, computed
exactly as the kernel computes them. CPUs and NUMA nodes get `devices/system/{cpu,node}`,
each node its `meminfo`.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

__all__ = ["PciNode", "SysfsBuilder", "cpulist", "node_meminfo", "standard_cpus"]

BRIDGE = 0x060400
HOST_BRIDGE = 0x060000


def cpulist(cpus: Iterable[int]) -> str:
    """The kernel's CPU list format, written independently of the code under test."""
    runs: list[list[int]] = []
    for cpu in sorted(cpus):
        if runs and runs[-1][1] == cpu - 1:
            runs[-1][1] = cpu
        else:
            runs.append([cpu, cpu])
    return ",".join(str(a) if a == b else f"{a}-{b}" for a, b in runs)


@dataclass(frozen=True, slots=True)
class PciNode:
    bdf: str  # "" for a host bridge directory
    path: Path  # absolute directory of this function (or host bridge)
    numa: int
    domain: int = 0


@dataclass
class SysfsBuilder:
    root: Path

    # --- helpers -------------------------------------------------------------------------------
    def _write(self, path: Path, text: str) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text + "\n")

    def _link(self, link: Path, target: Path) -> None:
        # As kernfs writes links: up from the link's directory to a strict ancestor of the
        # target, then down by name — so `device` reads `../../../0000:18:00.0`, never `../..`.
        link.parent.mkdir(parents=True, exist_ok=True)
        os.symlink(os.path.join(os.path.relpath(target.parent, link.parent), target.name), link)

    # --- PCI -----------------------------------------------------------------------------------
    def host_bridge(self, bus: int, *, numa: int, domain: int = 0, under: str = "") -> PciNode:
        """`devices/pci<dom>:<bus>`, or below `under` (a Hyper-V VMBus device, say)."""
        path = self.root / "devices" / under / f"pci{domain:04x}:{bus:02x}"
        path.mkdir(parents=True, exist_ok=True)
        return PciNode(bdf="", path=path, numa=numa, domain=domain)

    def function(
        self,
        parent: PciNode,
        bus: int,
        dev: int,
        fn: int = 0,
        *,
        vendor: int,
        device: int,
        cls: int,
        numa: int | None = None,
    ) -> PciNode:
        """One PCI function below `parent` (a host bridge or a bridge), kernel files and links."""
        bdf = f"{parent.domain:04x}:{bus:02x}:{dev:02x}.{fn}"
        node_numa = parent.numa if numa is None else numa
        path = parent.path / bdf
        for name, value in {
            "vendor": f"0x{vendor:04x}",
            "device": f"0x{device:04x}",
            "class": f"0x{cls:06x}",
            "numa_node": str(node_numa),
            "subsystem_vendor": f"0x{vendor:04x}",
            "subsystem_device": "0x0000",
            "revision": "0x00",
            "enable": "1",
            "irq": "0",
            "local_cpulist": "",
            "uevent": f"PCI_CLASS={cls:X}\nPCI_ID={vendor:04X}:{device:04X}\nPCI_SLOT_NAME={bdf}",
        }.items():
            self._write(path / name, value)
        self._link(path / "subsystem", self.root / "bus" / "pci")
        self._link(self.root / "bus" / "pci" / "devices" / bdf, path)
        return PciNode(bdf=bdf, path=path, numa=node_numa, domain=parent.domain)

    def bridge(self, parent: PciNode, bus: int, dev: int, fn: int = 0, **ids: int) -> PciNode:
        ids.setdefault("vendor", 0x8086)
        ids.setdefault("device", 0x352A)
        return self.function(parent, bus, dev, fn, cls=BRIDGE, **ids)

    def switch(
        self,
        above: PciNode,
        up_bus: int,
        down_devs: Sequence[int],
        *,
        vendor: int = 0x1000,
        device: int = 0xC030,
    ) -> list[PciNode]:
        """A PCIe switch: its upstream port on `up_bus`, downstream ports on the next bus."""
        up = self.bridge(above, up_bus, 0, vendor=vendor, device=device)
        return [self.bridge(up, up_bus + 1, d, vendor=vendor, device=device) for d in down_devs]

    def virtual_function(
        self,
        pf: PciNode,
        parent: PciNode,
        bus: int,
        dev: int,
        fn: int,
        *,
        vendor: int,
        device: int,
        cls: int,
        index: int,
    ) -> PciNode:
        vf = self.function(parent, bus, dev, fn, vendor=vendor, device=device, cls=cls)
        self._link(vf.path / "physfn", pf.path)
        self._link(pf.path / f"virtfn{index}", vf.path)
        return vf

    # --- class devices -------------------------------------------------------------------------
    def _class_device(self, kind: str, fn: PciNode, name: str) -> Path:
        path = fn.path / kind / name
        path.mkdir(parents=True)
        self._link(path / "device", fn.path)
        self._link(path / "subsystem", self.root / "class" / kind)
        self._link(self.root / "class" / kind / name, path)
        return path

    def netdev(self, fn: PciNode, name: str) -> Path:
        path = self._class_device("net", fn, name)
        self._write(path / "operstate", "up")
        self._write(path / "address", "00:00:00:00:00:00")
        return path

    def rdma(
        self,
        fn: PciNode,
        name: str,
        *,
        netdev: str | None = None,
        state: str = "4: ACTIVE",
        rate: str = "400 Gb/sec (4X NDR)",
        link_layer: str = "InfiniBand",
    ) -> Path:
        path = self._class_device("infiniband", fn, name)
        self._write(path / "node_type", "1: CA")
        self._write(path / "node_guid", "0000:0000:0000:0000")
        port = path / "ports" / "1"
        self._write(port / "state", state)
        self._write(port / "phys_state", "5: LinkUp")
        self._write(port / "rate", rate)
        self._write(port / "link_layer", link_layer)
        if netdev:
            self.netdev(fn, netdev)
        return path

    # --- CPUs and NUMA -------------------------------------------------------------------------
    def cpus(
        self, topology: dict[int, tuple[int, int, Sequence[int]]], *, arch: str = "x86_64"
    ) -> None:
        """`topology[cpu] = (package, core_id, thread siblings)` for every online CPU. An
        aarch64 kernel writes no `die_id` (only x86 and s390 define dies) and a `cluster_id`."""
        base = self.root / "devices" / "system" / "cpu"
        self._write(base / "online", cpulist(topology))
        self._write(base / "possible", cpulist(topology))
        for cpu, (package, core, siblings) in topology.items():
            topo = base / f"cpu{cpu}" / "topology"
            self._write(topo / "physical_package_id", str(package))
            self._write(topo / "core_id", str(core))
            self._write(topo / "thread_siblings_list", cpulist(siblings))
            if arch == "aarch64":
                self._write(topo / "cluster_id", str(core))
                self._write(topo / "core_cpus_list", cpulist(siblings))
            else:
                self._write(topo / "die_id", "0")

    def numa_nodes(
        self,
        nodes: dict[int, Iterable[int]],
        *,
        memory_kib: int = 0,
        node_memory_kib: Mapping[int, int] | None = None,
    ) -> None:
        """`nodes[node] = its CPUs`; `memory_kib` installed, split evenly over the nodes, or
        `node_memory_kib` per node (a CPU-less HBM or CXL node, a node of 0 kB), written to
        each node's meminfo as the kernel prints it (kB, right-aligned)."""
        base = self.root / "devices" / "system" / "node"
        nodes = {n: list(c) for n, c in nodes.items()}
        per_node = memory_kib // max(len(nodes), 1)
        memory = dict(node_memory_kib) if node_memory_kib is not None else (
            {n: per_node for n in nodes} if memory_kib else {}
        )  # fmt: skip
        self._write(base / "online", cpulist(nodes))
        self._write(base / "possible", cpulist(nodes))
        self._write(base / "has_cpu", cpulist(n for n, c in nodes.items() if c))
        if memory:
            self._write(base / "has_memory", cpulist(n for n, kib in memory.items() if kib))
        for node, cpus in nodes.items():
            self._write(base / f"node{node}" / "cpulist", cpulist(cpus))
            if node in memory:
                self._write(base / f"node{node}" / "meminfo", node_meminfo(node, memory[node]))


def node_meminfo(node: int, total_kib: int) -> str:
    """`/sys/devices/system/node/nodeN/meminfo` as node_read_meminfo() formats it."""
    free = total_kib * 9 // 10
    rows = [
        ("MemTotal", total_kib),
        ("MemFree", free),
        ("MemUsed", total_kib - free),
        ("SwapCached", 0),
        ("Active", 0),
        ("Inactive", 0),
        ("Dirty", 0),
        ("FilePages", 0),
        ("Mapped", 0),
        ("AnonPages", 0),
        ("Shmem", 0),
        ("KernelStack", 0),
        ("PageTables", 0),
        ("Slab", 0),
    ]
    lines = [f"Node {node} {name + ':':<15} {value:>8} kB" for name, value in rows]
    lines += [
        f"Node {node} {name + ':':<15} {0:>5}" for name in ("HugePages_Total", "HugePages_Free")
    ]
    return "\n".join(lines)


def standard_cpus(
    b: SysfsBuilder,
    *,
    sockets: int,
    cores: int,
    memory_kib: int,
    threads: int = 2,
    nodes_per_socket: int = 1,
    memory_only: Mapping[int, int] | None = None,
) -> None:
    """Linux's x86 numbering: first threads of every core, socket by socket, then the seconds;
    `memory_kib` (/proc/meminfo's MemTotal) split evenly over the NUMA nodes with CPUs, and
    `memory_only[node] = KiB` for NUMA nodes without CPUs (CXL expanders, HBM in flat mode)."""
    total_cores = sockets * cores
    topo: dict[int, tuple[int, int, list[int]]] = {}
    nodes: dict[int, list[int]] = {}
    per_node = cores // nodes_per_socket
    for socket in range(sockets):
        for core in range(cores):
            first = socket * cores + core
            siblings = [first + t * total_cores for t in range(threads)]
            node = socket * nodes_per_socket + core // per_node
            for cpu in siblings:
                topo[cpu] = (socket, core, siblings)
                nodes.setdefault(node, []).append(cpu)
    b.cpus(dict(sorted(topo.items())))
    per_node = memory_kib // len(nodes)
    memory = {n: per_node for n in nodes} | dict(memory_only or {}) if memory_kib else None
    b.numa_nodes(nodes | {n: [] for n in memory_only or {}}, node_memory_kib=memory)
