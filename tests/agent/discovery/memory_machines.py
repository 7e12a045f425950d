"""Fixture machines whose memory has no CPUs: Grace trays in NUMA mode, a CXL expander, HBM
in flat mode. Laid out as their kernels show them, after public outputs:

- GB200 NVL72 compute tray, driver in NUMA (non-CDMM) mode: sgl-project/sglang#11208
  (`nvidia-smi topo -m`: 4 GPUs and 6 NICs, CPU affinity 0-71 / 72-143, GPU NUMA IDs
  2, 10, 18, 26, NUMA affinity `0,3-9,11-17` and `1,19-25,27-33`: 34 NUMA nodes, every
  GPU–NIC cell SYS); vllm-project/vllm#39361 (each GPU's HBM a NUMA node with memory and no
  CPUs, nodes 2, 10, 18, 26; `nvmlDeviceGetNumaNodeId` returns those); ishandhanani/srt-slurm#164
  (Grace 0 holds GPUs 0, 1 and CPUs 0-71, Grace 1 GPUs 2, 3 and CPUs 72-143). PCI addresses
  and RDMA names as DGX GB200 trays show them: GPUs 0008/0009/0018/0019:01:00.0, ConnectX-7
  ibp3s0, ibP2p3s0, ibP16p3s0, ibP18p3s0 and BlueField-3 roceP6p3s0, roceP22p3s0 (the domain
  in decimal), each NIC's NUMA node its Grace's.
- GH200: bytedance/xpu-perf#129 (`lscpu`: 9 NUMA nodes, node 0 CPUs 0-71, nodes 1-8 none);
  node 1 the H100's 96 GB HBM, nodes 2-8 empty until MIG uses them; GPU 0009:01:00.0 and one
  ConnectX-7 beside it, as a one-superchip server ships.
- x86 with a CXL memory expander: the expander's memory onlines as a NUMA node after the
  sockets' (kernel Documentation/driver-api/cxl), here node 2 with 256 GiB beside socket 0.
- Xeon CPU Max in SNC4 flat mode: OSC's Cardinal documentation ("High bandwidth memory"):
  NUMA nodes 0-7 DDR with the cores, 8-15 the HBM (16 GB each), 16 NUMA nodes in all.
Memory sizes are the machines' installed memory less a typical firmware share.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from tests.agent.discovery.sysfs_builder import PciNode, SysfsBuilder, standard_cpus

__all__ = ["GRACE_MEMORY_KIB", "MEMORY_MACHINES", "gb200_hbm_node"]

NVIDIA, MELLANOX = 0x10DE, 0x15B3
GPU_3D, IB_CLASS, ETH_CLASS = 0x030200, 0x020700, 0x020000
CX7, BLUEFIELD3 = 0x1021, 0xA2DC
# 480 GB LPDDR5X per Grace, less what firmware keeps (472 GiB usable).
GRACE_MEMORY_KIB = 472 * 2**20
B200_HBM_KIB = 189471 * 1024  # nvidia-smi's 189471 MiB for a GB200's B200
H100_HBM_KIB = 97871 * 1024  # GH200 96 GB
GRACE_CORES = 72
NODES_PER_GB200_GPU = 8  # the HBM node, then 7 empty ones MIG instances can take


def gb200_hbm_node(gpu: int) -> int:
    """The NUMA node of GB200 GPU `gpu`'s HBM: 2, 10, 18, 26 (nvidia-smi's GPU NUMA ID)."""
    return 2 + NODES_PER_GB200_GPU * gpu


def _grace_cpus(b: SysfsBuilder, graces: int) -> dict[int, list[int]]:
    """Neoverse V2 cores, no SMT: CPU n is core n % 72 of package n // 72."""
    topo = {
        cpu: (cpu // GRACE_CORES, cpu % GRACE_CORES, [cpu]) for cpu in range(graces * GRACE_CORES)
    }
    b.cpus(topo, arch="aarch64")
    return {g: list(range(g * GRACE_CORES, (g + 1) * GRACE_CORES)) for g in range(graces)}


def _rooted(b: SysfsBuilder, domain: int, numa: int) -> PciNode:
    """A root complex of its own PCI domain (Grace gives each slot one) and its root port."""
    hb = b.host_bridge(0x00, numa=numa, domain=domain)
    return b.bridge(hb, 0x00, 0, vendor=NVIDIA, device=0x22B2)


def _nic(b: SysfsBuilder, domain: int, numa: int, name: str, *, device: int = CX7) -> None:
    """A ConnectX-7 or BlueField-3 behind its own switch, on bus 3 (…:03:00.0)."""
    (down,) = b.switch(_rooted(b, domain, numa), 0x01, [0], vendor=MELLANOX, device=0x1979)
    ib = device == CX7
    cls = IB_CLASS if ib else ETH_CLASS
    fn = b.function(down, 0x03, 0, vendor=MELLANOX, device=device, cls=cls)
    b.rdma(fn, name, netdev=name, link_layer="InfiniBand" if ib else "Ethernet")


def gb200_tray(root: Path, *, nodes_per_gpu: int = NODES_PER_GB200_GPU) -> None:
    """2 Graces, 4 B200 (two per Grace), 4 ConnectX-7 and 2 BlueField-3; 34 NUMA nodes.
    `nodes_per_gpu` below 8 drops empty MIG nodes (2 + 4 × it NUMA nodes): not a machine that
    ships, only the e2e measure of how the kubelet's hint search grows with NUMA nodes."""
    b = SysfsBuilder(root)
    nodes: dict[int, list[int]] = dict(_grace_cpus(b, 2))
    memory = dict.fromkeys(nodes, GRACE_MEMORY_KIB)
    for gpu in range(4):
        for i in range(nodes_per_gpu):
            node = 2 + nodes_per_gpu * gpu + i
            nodes[node] = []
            memory[node] = B200_HBM_KIB if i == 0 else 0
    b.numa_nodes(dict(sorted(nodes.items())), node_memory_kib=memory)
    for domain, grace in ((0x8, 0), (0x9, 0), (0x18, 1), (0x19, 1)):
        b.function(_rooted(b, domain, grace), 0x01, 0, vendor=NVIDIA, device=0x2941, cls=GPU_3D)
    for domain, grace, name in ((0x0, 0, "ibp3s0"), (0x2, 0, "ibP2p3s0"),
                                (0x10, 1, "ibP16p3s0"), (0x12, 1, "ibP18p3s0")):  # fmt: skip
        _nic(b, domain, grace, name)
    _nic(b, 0x6, 0, "roceP6p3s0", device=BLUEFIELD3)
    _nic(b, 0x16, 1, "roceP22p3s0", device=BLUEFIELD3)


def gh200(root: Path) -> None:
    """1 Grace and its H100: 9 NUMA nodes, node 1 the HBM, nodes 2-8 empty."""
    b = SysfsBuilder(root)
    nodes: dict[int, list[int]] = dict(_grace_cpus(b, 1))
    memory = {0: GRACE_MEMORY_KIB, 1: H100_HBM_KIB} | dict.fromkeys(range(2, 9), 0)
    b.numa_nodes(nodes | {n: [] for n in range(1, 9)}, node_memory_kib=memory)
    b.function(_rooted(b, 0x9, 0), 0x01, 0, vendor=NVIDIA, device=0x2342, cls=GPU_3D)
    (down,) = b.switch(_rooted(b, 0x0, 0), 0x01, [0], vendor=MELLANOX, device=0x1979)
    fn = b.function(down, 0x03, 0, vendor=MELLANOX, device=CX7, cls=IB_CLASS)
    b.rdma(fn, "ibp3s0", netdev="ibp3s0")


def cxl_server(root: Path) -> None:
    """2 sockets of 32 cores; per socket a switch with 2 H100 PCIe and a ConnectX-7 (PIX);
    NUMA node 2 a 256 GiB CXL expander without CPUs."""
    b = SysfsBuilder(root)
    standard_cpus(b, sockets=2, cores=32, memory_kib=2 * 256 * 2**20, memory_only={2: 256 * 2**20})
    for socket, bus in ((0, 0x17), (1, 0x97)):
        hb = b.host_bridge(bus, numa=socket)
        downs = b.switch(b.bridge(hb, bus, 1), bus + 1, [0, 1, 2], device=0xC030)
        for d in (0, 1):
            b.function(downs[d], bus + 3 + d, 0, vendor=NVIDIA, device=0x2331, cls=GPU_3D)
        fn = b.function(downs[2], bus + 5, 0, vendor=MELLANOX, device=CX7, cls=IB_CLASS)
        b.rdma(fn, f"mlx5_{socket}", netdev=f"ibp{bus + 5}s0")


def xeon_max_flat(root: Path) -> None:
    """2 × Xeon CPU Max 9470 (52 cores, SNC4): NUMA nodes 0-7 with 13 cores and 64 GiB DDR5
    each, 8-15 the HBM, 16 GiB each and no CPUs. No GPU."""
    b = SysfsBuilder(root)
    hbm = dict.fromkeys(range(8, 16), 16 * 2**20)
    standard_cpus(b, sockets=2, cores=52, threads=1, nodes_per_socket=4,
                  memory_kib=8 * 64 * 2**20, memory_only=hbm)  # fmt: skip


MEMORY_MACHINES: dict[str, Callable[[Path], None]] = {
    "gb200-tray": gb200_tray,
    "gh200": gh200,
    "cxl-server": cxl_server,
    "xeon-max-flat": xeon_max_flat,
}
