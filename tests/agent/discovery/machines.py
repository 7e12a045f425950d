"""Fixture machines laid out as their kernels show them, after public topology outputs.

Sources (see /work/shared/reference/topologies.md): HGX H100 — NVIDIA/nccl issue #1264
`nvidia-smi topo -m`; DGX H100 — DGX H100 user guide table 6 (GPU ↔ mlx5 device, netdev names
give the NIC buses) with Broadcom Gen5 switches and NVSwitches as 0x068000 bridges; DGX A100
NPS4 — NVIDIA/nccl issue #1505 (two levels of 1000:c010 switches, GPU0 at 07:00.0, storage
NICs at 61:00.x); HGX A800 — NVIDIA/nccl issue #933 `nvidia-smi topo -m` (NODE pairs).
The PCIe server, workstation and VM are typical layouts of those classes.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from pathlib import Path

from tests.agent.discovery.memory_machines import MEMORY_MACHINES
from tests.agent.discovery.sysfs_builder import PciNode, SysfsBuilder, standard_cpus

__all__ = ["MACHINES", "build", "standard_cpus"]

NVIDIA, MELLANOX, INTEL, AMD, BROADCOM = 0x10DE, 0x15B3, 0x8086, 0x1022, 0x1000
GPU_3D, GPU_VGA, NVSWITCH_CLASS = 0x030200, 0x030000, 0x068000
IB_CLASS, ETH_CLASS, NVME_CLASS, PLATFORM = 0x020700, 0x020000, 0x010802, 0x088000
# Installed memory in KiB (/proc/meminfo's MemTotal), as the machines ship: 2 TiB and 1 TiB
# boards less what firmware keeps.
DGX_H100_MEMORY, DGX_A100_MEMORY = 2063937144, 1056323328


def _platform(b: SysfsBuilder, hb: PciNode, bus: int, count: int) -> None:
    """Root-complex integrated devices (IIO/IOMMU/RAS functions): present, never GPUs."""
    for i in range(count):
        b.function(hb, bus, i // 8, i % 8, vendor=INTEL, device=0x09A2 + i % 4, cls=PLATFORM)


def _name_nics(
    b: SysfsBuilder, nics: list[tuple[PciNode, str]], names: list[str] | None = None
) -> None:
    """mlx5_N in PCI order, as the driver probes them (or `names`, given in PCI order);
    netdev names carry the bus in decimal."""
    for i, (fn, link_layer) in enumerate(sorted(nics, key=lambda n: n[0].bdf)):
        domain, bus, fn_no = int(fn.bdf[:4], 16), int(fn.bdf[5:7], 16), int(fn.bdf[-1])
        # systemd's names: the domain appears only when it is not 0 (ibP3p0s0).
        where = f"P{domain}p{bus}s0" if domain else f"p{bus}s0"
        netdev = f"ib{where}" if link_layer == "InfiniBand" else f"en{where}f{fn_no}np{fn_no}"
        b.rdma(fn, names[i] if names else f"mlx5_{i}", netdev=netdev, link_layer=link_layer)


_H100_NIC_BUSES = [0x18, 0x40, 0x4F, 0x5E, 0x9A, 0xC0, 0xCE, 0xDC]


def _hgx_board(
    b: SysfsBuilder,
    *,
    storage: list[tuple[int, int, int]],
    nic_numa: bool,
    memory_kib: int,
    cores: int = 56,
    gpu_device: int = 0x2330,
    names: list[str] | None = None,
) -> None:
    """8 GPU slots, each: host bridge → root port → switch with NIC, 2 NVMe, GPU; storage
    adapters (host bridge bus, socket, functions) straight on a root port."""
    standard_cpus(b, sockets=2, cores=cores, memory_kib=memory_kib)
    nics: list[tuple[PciNode, str]] = []
    for slot, n in enumerate(_H100_NIC_BUSES):
        socket = slot // 4
        hb = b.host_bridge(n - 3, numa=socket)
        _platform(b, hb, n - 3, 8)
        rp = b.bridge(hb, n - 3, 1)
        downs = b.switch(rp, n - 2, [0, 1, 2, 3], vendor=BROADCOM, device=0xC030)
        nic = b.function(
            downs[0], n, 0, vendor=MELLANOX, device=0x1021, cls=IB_CLASS,
            numa=socket if nic_numa else -1,
        )  # fmt: skip
        nics.append((nic, "InfiniBand"))
        for d in (1, 2):
            b.function(downs[d], n + d, 0, vendor=0x144D, device=0xA80A, cls=NVME_CLASS)
        b.function(downs[3], n + 3, 0, vendor=NVIDIA, device=gpu_device, cls=GPU_3D)
    for hb_bus, socket, functions in storage:
        hb = b.host_bridge(hb_bus, numa=socket)
        _platform(b, hb, hb_bus, 8)
        rp = b.bridge(hb, hb_bus, 1)
        for fn in range(functions):
            numa = socket if nic_numa else -1
            nic = b.function(
                rp, hb_bus + 1, 0, fn, vendor=MELLANOX, device=0x1021, cls=ETH_CLASS, numa=numa
            )
            nics.append((nic, "Ethernet"))
    # Platform root complex: chipset functions and the BMC's VGA behind its PCI bridge.
    hb0 = b.host_bridge(0x00, numa=0)
    _platform(b, hb0, 0x00, 24)
    rp = b.bridge(hb0, 0x00, 0x1C)
    aspeed = b.bridge(rp, 0x02, 0, vendor=0x1A03, device=0x1150)
    b.function(aspeed, 0x03, 0, vendor=0x1A03, device=0x2000, cls=GPU_VGA)
    # NVSwitches: NVIDIA functions of class 0x068000 (bridge, other) — not GPUs.
    hb = b.host_bridge(0xE5, numa=1)
    _platform(b, hb, 0xE5, 8)
    downs = b.switch(b.bridge(hb, 0xE5, 1), 0xE6, [0, 1, 2, 3], vendor=BROADCOM, device=0xC030)
    for i, down in enumerate(downs):
        b.function(down, 0xE8 + i, 0, vendor=NVIDIA, device=0x22A3, cls=NVSWITCH_CLASS)
    _name_nics(b, nics, names)


def hgx_h100(root: Path) -> None:
    """nccl #1264: 10 NICs, all with numa_node -1; NIC3/NIC4 are one storage adapter."""
    _hgx_board(
        SysfsBuilder(root), storage=[(0x53, 0, 2)], nic_numa=False, memory_kib=DGX_H100_MEMORY
    )


def dgx_h100(root: Path) -> None:
    """DGX H100: 12 NICs (mlx5_1/2 and mlx5_7/8 storage), NUMA known; ~230 PCI functions."""
    _hgx_board(
        SysfsBuilder(root),
        storage=[(0x26, 0, 2), (0xA7, 1, 2)],
        nic_numa=True,
        memory_kib=DGX_H100_MEMORY,
    )


def hgx_a800(root: Path) -> None:
    """nccl #933: 8 A800, 9 NICs with known NUMA nodes whose names alternate between the
    sockets (mlx5_1 beside GPU4, mlx5_2 beside GPU0, …); mlx5_0 alone on socket 0."""
    _hgx_board(
        SysfsBuilder(root),
        storage=[(0x26, 0, 1)],
        nic_numa=True,
        memory_kib=DGX_A100_MEMORY,
        cores=48,
        gpu_device=0x20F3,
        names=[f"mlx5_{i}" for i in (2, 0, 4, 6, 8, 1, 3, 5, 7)],
    )


def dgx_a100(root: Path) -> None:
    """NPS4: 8 NUMA nodes. Per GPU host bridge: root port → level-1 switch → four level-2
    switches holding GPU, NIC, GPU, NIC — so each GPU is PXB to the two NICs beside it."""
    b = SysfsBuilder(root)
    standard_cpus(b, sockets=2, cores=64, memory_kib=DGX_A100_MEMORY, nodes_per_socket=4)
    nics: list[tuple[PciNode, str]] = []
    for base, numa in ((0x00, 3), (0x40, 1), (0x80, 7), (0xA0, 5)):
        hb = b.host_bridge(base, numa=numa)
        _platform(b, hb, base, 4)
        rp = b.bridge(hb, base, 1, 1, vendor=AMD, device=0x1483)
        l1 = b.switch(rp, base + 1, [0x00, 0x04, 0x08, 0x0C], device=0xC010)
        gpu_a = b.switch(l1[0], base + 3, [0x00, 0x04, 0x08], device=0xC010)
        nic_a = b.switch(l1[1], base + 8, [0x00, 0x04, 0x08], device=0xC010)
        gpu_b = b.switch(l1[2], base + 0x0D, [0x00], device=0xC010)
        nic_b = b.switch(l1[3], base + 0x10, [0x00], device=0xC010)
        for i, (down, bus) in enumerate(((gpu_a[0], 5), (gpu_a[1], 6), (nic_a[0], 0xA))):
            b.function(down, base + bus, 0, vendor=0x144D, device=0xA824 + i, cls=NVME_CLASS)
        b.function(nic_a[1], base + 0x0B, 0, vendor=0x144D, device=0xA824, cls=NVME_CLASS)
        for down, bus in ((gpu_a[2], 0x07), (gpu_b[0], 0x0F)):
            b.function(down, base + bus, 0, vendor=NVIDIA, device=0x20B0, cls=GPU_3D)
        for down, bus in ((nic_a[2], 0x0C), (nic_b[0], 0x12)):
            nic = b.function(down, base + bus, 0, vendor=MELLANOX, device=0x101B, cls=IB_CLASS)
            nics.append((nic, "InfiniBand"))
    for base, numa in ((0x60, 2), (0xC0, 6)):  # storage adapters straight on root ports
        hb = b.host_bridge(base, numa=numa)
        rp = b.bridge(hb, base, 3, 1, vendor=AMD, device=0x1483)
        for fn in (0, 1):
            nic = b.function(rp, base + 1, 0, fn, vendor=MELLANOX, device=0x101B, cls=ETH_CLASS)
            nics.append((nic, "Ethernet"))
    for i, bus in enumerate((0xE1, 0xE2, 0xE3, 0xE4, 0xE5, 0xE6)):  # NVSwitches
        hb = b.host_bridge(0xE0, numa=4)
        rp = b.bridge(hb, 0xE0, 1, i, vendor=AMD, device=0x1483)
        b.function(rp, bus, 0, vendor=NVIDIA, device=0x1AF1, cls=NVSWITCH_CLASS)
    _name_nics(b, nics)


def pcie_server(root: Path, *, gpu_device: int = 0x20F1) -> None:
    """Two sockets, four PCIe GPUs each alone on a root port, one RoCE NIC per socket that
    shares a host bridge with one GPU (PHB) and not with the other (NODE). The GPUs are A100
    PCIe (10de:20f1) unless `gpu_device` says otherwise."""
    b = SysfsBuilder(root)
    standard_cpus(b, sockets=2, cores=32, memory_kib=528161664)
    nics: list[tuple[PciNode, str]] = []
    for base, numa, nic in ((0x17, 0, True), (0x31, 0, False), (0x98, 1, True), (0xB1, 1, False)):
        hb = b.host_bridge(base, numa=numa)
        _platform(b, hb, base, 5)
        gpu_rp = b.bridge(hb, base, 2)
        b.function(gpu_rp, base + 1, 0, vendor=NVIDIA, device=gpu_device, cls=GPU_3D)
        if nic:
            nic_rp = b.bridge(hb, base, 4)
            fn = b.function(nic_rp, base + 2, 0, vendor=MELLANOX, device=0x101D, cls=ETH_CLASS)
            nics.append((fn, "Ethernet"))
    _name_nics(b, nics)


def workstation(root: Path) -> None:
    """One socket, one host bridge, every numa_node -1; two GPUs (with HDMI audio functions)
    and a ConnectX-6 on separate root ports."""
    b = SysfsBuilder(root)
    standard_cpus(b, sockets=1, cores=16, memory_kib=131072000)
    hb = b.host_bridge(0x00, numa=-1)
    b.function(hb, 0x00, 0, vendor=AMD, device=0x14A4, cls=0x060000)
    for dev_fn, bus in ((1, 0x01), (2, 0x02)):
        rp = b.bridge(hb, 0x00, 1, dev_fn, vendor=AMD, device=0x14AB)
        b.function(rp, bus, 0, 0, vendor=NVIDIA, device=0x26B1, cls=GPU_VGA)
        b.function(rp, bus, 0, 1, vendor=NVIDIA, device=0x22BA, cls=0x040300)
    rp = b.bridge(hb, 0x00, 2, 1, vendor=AMD, device=0x14AB)
    nic = b.function(rp, 0x03, 0, vendor=MELLANOX, device=0x101B, cls=IB_CLASS)
    b.rdma(nic, "ibp3s0", netdev="ibp3s0")  # rdma-core's stable names: not mlx5_N


def vm(root: Path) -> None:
    """A KVM guest: virtio devices and an emulated VGA, no GPU, no RDMA, no NUMA directory."""
    b = SysfsBuilder(root)
    b.cpus({cpu: (0, cpu, [cpu]) for cpu in range(8)})
    hb = b.host_bridge(0x00, numa=-1)
    b.function(hb, 0x00, 0, vendor=INTEL, device=0x29C0, cls=0x060000)
    b.function(hb, 0x00, 1, vendor=0x1234, device=0x1111, cls=GPU_VGA)
    for i, (device, cls) in enumerate(((0x1041, ETH_CLASS), (0x1042, 0x010000))):
        rp = b.bridge(hb, 0x00, 2, i, vendor=0x1B36, device=0x000C)
        fn = b.function(rp, i + 1, 0, vendor=0x1AF4, device=device, cls=cls)
        if cls == ETH_CLASS:  # virtio-net: the netdev hangs off virtio0, not the PCI function
            virtio = fn.path / "virtio0"
            virtio.mkdir()
            b.netdev(PciNode(bdf="virtio0", path=virtio, numa=-1), "eth0")


def hyperv_gpu_vm(root: Path) -> None:
    """A Hyper-V guest (cloud GPU VM): every passed-through GPU and NIC is alone in its own PCI
    domain below a VMBus device, so no two share a root complex; NUMA nodes are known."""
    b = SysfsBuilder(root)
    standard_cpus(b, sockets=2, cores=12, memory_kib=464000000)
    vmbus = "LNXSYSTM:00/LNXSYBUS:00/PNP0A03:00/device:07/VMBUS:01"
    nics: list[tuple[PciNode, str]] = []
    for i, (device, cls, numa) in enumerate(
        [(0x2330, GPU_3D, 0), (0x2330, GPU_3D, 1), (0x101E, IB_CLASS, 0), (0x101E, IB_CLASS, 1)]
    ):
        domain = i + 1
        guid = f"00000041-{domain:04x}-0000-3130-444531334632"
        hb = b.host_bridge(0, numa=numa, domain=domain, under=f"{vmbus}/{guid}")
        vendor = NVIDIA if cls == GPU_3D else MELLANOX
        fn = b.function(hb, 0, 0, vendor=vendor, device=device, cls=cls)
        if cls == IB_CLASS:  # a VF on the host, but the guest sees no physfn
            nics.append((fn, "InfiniBand"))
    _name_nics(b, nics)


MACHINES: dict[str, Callable[[Path], None]] = {
    "hgx-h100": hgx_h100,
    "dgx-h100": dgx_h100,
    "dgx-a100": dgx_a100,
    "hgx-a800": hgx_a800,
    "pcie-server": pcie_server,
    # The same layout with L40S boards (10de:26b9, a 3D controller), as PCIe inference and
    # fine-tuning servers ship them.
    "pcie-l40s": partial(pcie_server, gpu_device=0x26B9),
    "workstation": workstation,
    "vm": vm,
    "hyperv-gpu-vm": hyperv_gpu_vm,
    **MEMORY_MACHINES,  # Grace trays, CXL and HBM memory-only NUMA nodes
}


def build(name: str, root: Path) -> Path:
    """Lay out machine `name` under `root` and return root (for benchmarks and tests)."""
    root.mkdir(parents=True, exist_ok=True)
    MACHINES[name](root)
    return root
