"""Machines whose memory has no CPUs (tests/agent/discovery/memory_machines.py names the public
outputs each is built from): what discovery reads, the labels, and where a Grace GPU sits.

Expected values come from those outputs, never from this code's own output.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from agent.discovery.discover import DiscoveryOptions, discover
from agent.discovery.topology import build_topology
from agent.sources import cpu, nic, nvml, pci
from agent.sources.kubelet import KubeletFiles
from common.vocabulary import TOPOLOGY_ANNOTATION, Label
from tests.agent.discovery.memory_machines import gb200_hbm_node
from tests.agent.position.nvml_standin import DeviceGpu, standin_devices

Machine = Callable[[str], Path]
L = Label

# name: (packages, cores, online CPUs, NUMA nodes listed, of them with CPUs, GPUs, RDMA NICs)
RAW = {
    "gb200-tray": (2, 144, 144, 34, 2, 4, 6),  # sglang#11208: NUMA IDs up to 33
    "gh200": (1, 72, 72, 9, 1, 1, 1),  # xpu-perf#129: 9 nodes, node 0 0-71
    "cxl-server": (2, 64, 128, 3, 2, 4, 2),
    "xeon-max-flat": (2, 104, 104, 16, 8, 0, 0),  # OSC Cardinal: 0-7 DDR, 8-15 HBM
}


@pytest.mark.parametrize("name", RAW)
def test_sources_read_memory_only_nodes(name: str, built_machine: Machine) -> None:
    packages, cores, online, listed, with_cpus, gpus, rdma = RAW[name]
    facts = cpu.discover(built_machine(name))
    assert (len(facts.packages), len(facts.cores), len(facts.online)) == (packages, cores, online)
    assert len(facts.numa_nodes) == listed
    assert sum(1 for cpus in facts.numa_nodes.values() if cpus) == with_cpus
    assert len(pci.discover(built_machine(name)).gpus()) == gpus
    assert len(nic.discover(built_machine(name)).rdma) == rdma


HW_LABELS = {
    # Labels count the NUMA nodes with CPUs: 2 Graces, 2 GPUs on each. GPU and NIC under one
    # Grace sit on different root complexes of one NUMA node: NODE (docs/labels.md says why
    # not nvidia-smi's SYS), which no pairing takes.
    "gb200-tray": {
        L.CPU_SOCKETS: "2", L.NUMA_NODES: "2", L.MAX_CPUS_PER_NUMA_NODE: "72",
        L.MAX_MEMORY_GIB_PER_NUMA_NODE: "472", L.GPUS: "4", L.GPU_NUMA_NODES: "2",
        L.MAX_GPUS_PER_NUMA_NODE: "2", L.GPU_PCI_SWITCHES: "0", L.MAX_GPUS_PER_PCI_SWITCH: "0",
        L.RDMA_NICS: "6", L.GPU_NIC_PAIRS: "0", L.GPU_NIC_LINK: "NODE",
    },
    "gh200": {
        L.CPU_SOCKETS: "1", L.NUMA_NODES: "1", L.MAX_CPUS_PER_NUMA_NODE: "72",
        L.MAX_MEMORY_GIB_PER_NUMA_NODE: "472", L.GPUS: "1", L.GPU_NUMA_NODES: "1",
        L.MAX_GPUS_PER_NUMA_NODE: "1", L.GPU_PCI_SWITCHES: "0", L.MAX_GPUS_PER_PCI_SWITCH: "0",
        L.RDMA_NICS: "1", L.GPU_NIC_PAIRS: "0", L.GPU_NIC_LINK: "NODE",
    },
    # The CXL node's 256 GiB is no NUMA node's with CPUs: the largest stays a socket's.
    "cxl-server": {
        L.CPU_SOCKETS: "2", L.NUMA_NODES: "2", L.MAX_CPUS_PER_NUMA_NODE: "64",
        L.MAX_MEMORY_GIB_PER_NUMA_NODE: "256", L.GPUS: "4", L.GPU_NUMA_NODES: "2",
        L.MAX_GPUS_PER_NUMA_NODE: "2", L.GPU_PCI_SWITCHES: "2", L.MAX_GPUS_PER_PCI_SWITCH: "2",
        L.RDMA_NICS: "2", L.GPU_NIC_PAIRS: "2", L.GPU_NIC_LINK: "PIX",
    },
    "xeon-max-flat": {
        L.CPU_SOCKETS: "2", L.NUMA_NODES: "8", L.MAX_CPUS_PER_NUMA_NODE: "13",
        L.MAX_MEMORY_GIB_PER_NUMA_NODE: "64", L.GPUS: "0", L.GPU_NUMA_NODES: "0",
        L.MAX_GPUS_PER_NUMA_NODE: "0", L.GPU_PCI_SWITCHES: "0", L.MAX_GPUS_PER_PCI_SWITCH: "0",
        L.RDMA_NICS: "0", L.GPU_NIC_PAIRS: "0",
    },
}  # fmt: skip


@pytest.mark.parametrize("name", HW_LABELS)
def test_labels_count_only_nodes_with_cpus(
    name: str, built_machine: Machine, options: Callable[..., DiscoveryOptions]
) -> None:
    assert dict(discover(options(built_machine(name))).labels) == HW_LABELS[name]


def test_gb200_annotation_lists_every_numa_node_the_kernel_lists(
    built_machine: Machine, options: Callable[..., DiscoveryOptions]
) -> None:
    result = discover(options(built_machine("gb200-tray")))
    doc = json.loads(result.annotations[TOPOLOGY_ANNOTATION])
    nodes = {n["id"]: n for n in doc["numaNodes"]}
    assert sorted(nodes) == list(range(34))
    assert (nodes[0]["cpus"], nodes[1]["cpus"]) == ("0-71", "72-143")  # srt-slurm#164
    hbm = [gb200_hbm_node(g) for g in range(4)]
    assert hbm == [2, 10, 18, 26]  # sglang#11208's GPU NUMA IDs
    assert all(nodes[n]["cpus"] == "" and nodes[n]["memoryKiB"] > 0 for n in hbm)
    empty = set(range(2, 34)) - set(hbm)
    assert {nodes[n]["memoryKiB"] for n in empty} == {0}  # MIG's nodes: 0 kB until used
    # Each GPU on its Grace, as the device plugin (the PCI function's numa_node) says.
    assert [g["numa"] for g in doc["gpus"]] == [0, 0, 1, 1]
    nics = {n["name"]: n["numa"] for n in doc["nics"]}
    assert nics == {"ibp3s0": 0, "ibP2p3s0": 0, "roceP6p3s0": 0,
                    "ibP16p3s0": 1, "ibP18p3s0": 1, "roceP22p3s0": 1}  # fmt: skip
    links = {
        (g["pci"], n["name"]): doc["gpuNicLinks"][i][j]
        for i, g in enumerate(doc["gpus"]) for j, n in enumerate(doc["nics"])
    }  # fmt: skip
    assert links[("0008:01:00.0", "ibp3s0")] == "NODE"
    assert links[("0008:01:00.0", "ibP16p3s0")] == "SYS"
    assert links[("0019:01:00.0", "ibP18p3s0")] == "NODE"


# What NVML says on a GB200 tray in NUMA mode (sglang#11208's CPU Affinity, NUMA Affinity
# and GPU NUMA ID columns, which nvidia-smi takes from these three calls).
def _gb200_nvml(numa_ids: bool = True) -> list[DeviceGpu]:
    def spread(first: int, grace: int) -> frozenset[int]:
        return frozenset({grace, *range(first, first + 7), *range(first + 8, first + 15)})

    rows = [("00000008:01:00.0", 0), ("00000009:01:00.0", 0),
            ("00000018:01:00.0", 1), ("00000019:01:00.0", 1)]  # fmt: skip
    return [
        DeviceGpu(
            bus_id,
            numa_node_id=gb200_hbm_node(i) if numa_ids else None,
            cpus=frozenset(range(72 * grace, 72 * grace + 72)),
            memory_nodes=spread(3 + 16 * grace, grace),
        )
        for i, (bus_id, grace) in enumerate(rows)
    ]


def _session(module: object) -> nvml.NvmlSession:
    return nvml.NvmlSession(initialise=lambda: (module, ""))  # type: ignore[arg-type,return-value]


def test_nvml_reads_where_a_gb200_gpu_sits() -> None:
    calls: list[str] = []
    with standin_devices(_gb200_nvml(), calls) as module:
        info = nvml.discover(session=_session(module))
    assert info.reason is None and info.driver_version == "570.172.08"
    gpu0 = info.gpus["0008:01:00.0"]
    assert gpu0.numa_node_id == 2
    assert gpu0.cpu_affinity == frozenset(range(72))
    assert gpu0.memory_affinity == frozenset({0, *range(3, 10), *range(11, 18)})  # 0,3-9,11-17
    assert info.gpus["0019:01:00.0"].cpu_affinity == frozenset(range(72, 144))
    assert "memory affinity scope 0" in calls  # NVML_AFFINITY_SCOPE_NODE


def _topology(root: Path, info: nvml.NvmlInfo):  # type: ignore[no-untyped-def]
    return build_topology(
        cpu=cpu.discover(root), pci=pci.discover(root), nics=nic.discover(root), nvml=info,
        kubelet=KubeletFiles(), datasets={},
    )  # fmt: skip


def test_gpu_numa_is_where_it_attaches_never_its_memorys_node(built_machine: Machine) -> None:
    with standin_devices(_gb200_nvml()) as module:
        info = nvml.discover(session=_session(module))
    topo = _topology(built_machine("gb200-tray"), info)
    assert [g.place.numa_node for g in topo.gpus] == [0, 0, 1, 1]
    assert [g.memory_numa for g in topo.gpus] == [2, 10, 18, 26]
    doc = topo.as_dict()
    assert [(g["numa"], g["memoryNuma"]) for g in doc["gpus"]][:2] == [(0, 2), (0, 10)]


def test_unknown_pci_numa_node_on_aarch64_comes_from_nvmls_close_cpus(
    fresh_machine: Machine,
) -> None:
    root = fresh_machine("gb200-tray")
    for bdf in ("0008:01:00.0", "0009:01:00.0", "0018:01:00.0", "0019:01:00.0"):
        (root / "bus/pci/devices" / bdf / "numa_node").write_text("-1\n")
    without = _topology(root, nvml.NvmlInfo(gpus={}, driver_version=None, reason="no NVML"))
    assert [g.place.numa_node for g in without.gpus] == [None] * 4  # unknown, no guess
    with standin_devices(_gb200_nvml()) as module:
        info = nvml.discover(session=_session(module))
    topo = _topology(root, info)
    assert [g.place.numa_node for g in topo.gpus] == [0, 0, 1, 1]
    assert topo.links[0][[n.name for n in topo.nics].index("ibp3s0")] == "NODE"


def test_nvml_without_placement_answers_is_no_error() -> None:
    """An x86 GPU: NOT_SUPPORTED for all three; the GPU is still read."""
    gpu = DeviceGpu("00000000:1B:00.0", name="NVIDIA H100 80GB HBM3")
    with standin_devices([gpu]) as module:
        info = nvml.discover(session=_session(module))
    read = info.gpus["0000:1b:00.0"]
    assert (read.name, read.nvlinks) == ("NVIDIA H100 80GB HBM3", 18)
    assert (read.numa_node_id, read.cpu_affinity, read.memory_affinity) == (None, None, None)


# --- bad input: labels from what is known, one log line, never a crash --------------------------


def test_hbm_node_at_0_kb_while_the_driver_initialises(
    fresh_machine: Machine, options: Callable[..., DiscoveryOptions]
) -> None:
    root = fresh_machine("gh200")
    meminfo = root / "devices/system/node/node1/meminfo"
    meminfo.write_text(meminfo.read_text().replace(str(97871 * 1024), "0"))
    result = discover(options(root))
    assert dict(result.labels) == HW_LABELS["gh200"]
    doc = json.loads(result.annotations[TOPOLOGY_ANNOTATION])
    assert doc["numaNodes"][1] == {"id": 1, "cpus": "", "memoryKiB": 0}


def test_more_than_64_numa_nodes(
    fresh_machine: Machine,
    options: Callable[..., DiscoveryOptions],
    caplog: pytest.LogCaptureFixture,
) -> None:
    """80 memory-only nodes (past the kubelet's 64-bit NUMA masks) and one numbered past any
    kernel's MAX_NUMNODES: the 80 are listed, the impossible one skipped with one line."""
    root = fresh_machine("cxl-server")
    base = root / "devices/system/node"
    for node in [*range(3, 83), 5000]:
        (base / f"node{node}").mkdir()
        (base / f"node{node}" / "cpulist").write_text("\n")
        (base / f"node{node}" / "meminfo").write_text(f"Node {node} MemTotal:  1048576 kB\n")
    with caplog.at_level("WARNING", logger="agent.sources.cpu"):
        result = discover(options(root))
    assert dict(result.labels) == HW_LABELS["cxl-server"]
    doc = json.loads(result.annotations[TOPOLOGY_ANNOTATION])
    assert [n["id"] for n in doc["numaNodes"]] == list(range(83))
    lines = [r.getMessage() for r in caplog.records]
    assert lines == ["skipping 1 NUMA node directories numbered 1024 or more"]
