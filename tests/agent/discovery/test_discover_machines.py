"""Discovery on kernel-faithful trees of real machines: raw facts, then labels, then the matrix.

Expected values come from the machines' public topology outputs (tests/agent/discovery/machines.py
names the sources), never from this code's own output.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

from agent.discovery.discover import DiscoveryOptions, discover
from agent.sources import cpu, nic, pci
from common.k8s_names import is_label_key, is_label_value
from common.vocabulary import TOPOLOGY_ANNOTATION, Label, is_owned_key

Machine = Callable[[str], Path]

# --- raw facts, per source ----------------------------------------------------------------------

RAW = {
    # name: (packages, physical cores, online CPUs, NUMA nodes, NVIDIA GPUs, NVSwitches, RDMA PFs)
    "hgx-h100": (2, 112, 224, 2, 8, 4, 10),
    "dgx-h100": (2, 112, 224, 2, 8, 4, 12),
    "dgx-a100": (2, 128, 256, 8, 8, 6, 12),
    "hgx-a800": (2, 96, 192, 2, 8, 4, 9),
    "pcie-server": (2, 64, 128, 2, 4, 0, 2),
    "workstation": (1, 16, 32, 1, 2, 0, 1),
    "vm": (1, 8, 8, 1, 0, 0, 0),
    "hyperv-gpu-vm": (2, 24, 48, 2, 2, 0, 2),
}


@pytest.mark.parametrize("name", RAW)
def test_sources_read_raw_facts(name: str, built_machine: Machine) -> None:
    root = built_machine(name)
    packages, cores, online, nodes, gpus, nvswitches, rdma = RAW[name]
    cpus = cpu.discover(root)
    assert (len(cpus.packages), len(cpus.cores), len(cpus.online)) == (packages, cores, online)
    assert len(cpus.numa_nodes) == nodes
    devices = pci.discover(root)
    assert len(devices.gpus()) == gpus
    nvidia_bridges = [
        d for d in devices.devices.values() if d.vendor == 0x10DE and d.pci_class == 0x068000
    ]
    assert len(nvidia_bridges) == nvswitches
    assert not any(d.is_nvidia_gpu for d in nvidia_bridges)
    nics = nic.discover(root)
    assert len(nics.rdma) == rdma
    assert all(n.bdf in devices.devices for n in nics.rdma)


def test_pci_hierarchy_follows_relative_links(built_machine: Machine) -> None:
    devices = pci.discover(built_machine("dgx-h100")).devices
    gpu0 = devices["0000:1b:00.0"]
    # root port 15:01.0 → switch upstream 16:00.0 → downstream 17:03.0 → GPU
    assert gpu0.root_complex == "pci0000:15"
    assert gpu0.ancestors == ("0000:15:01.0", "0000:16:00.0", "0000:17:03.0")
    assert gpu0.switch == "0000:16:00.0"
    assert gpu0.numa_node == 0
    assert (gpu0.vendor, gpu0.device, gpu0.pci_class) == (0x10DE, 0x2330, 0x030200)
    storage = devices["0000:27:00.1"]
    assert storage.switch is None and storage.ancestors == ("0000:26:01.0",)
    # The BMC's VGA is a display controller, but not NVIDIA's: no GPU.
    assert not devices["0000:03:00.0"].is_nvidia_gpu


def test_nic_source_reads_names_netdevs_and_ports(built_machine: Machine) -> None:
    nics = {n.name: n for n in nic.discover(built_machine("dgx-h100")).rdma}
    assert list(nics)[:4] == ["mlx5_0", "mlx5_1", "mlx5_2", "mlx5_3"]
    assert list(nics)[-2:] == ["mlx5_10", "mlx5_11"]  # natural order, not mlx5_1, mlx5_10, …
    assert nics["mlx5_0"].bdf == "0000:18:00.0"
    assert nics["mlx5_0"].netdevs == ("ibp24s0",)
    port = nics["mlx5_0"].ports[0]
    assert (port.number, port.state, port.rate) == (1, "ACTIVE", "400 Gb/sec (4X NDR)")
    assert nics["mlx5_2"].ports[0].link_layer == "Ethernet"


def test_workstation_rdma_name_is_not_mlx5(built_machine: Machine) -> None:
    assert [n.name for n in nic.discover(built_machine("workstation")).rdma] == ["ibp3s0"]


def test_vm_netdev_behind_virtio_is_not_a_pci_nic(built_machine: Machine) -> None:
    nics = nic.discover(built_machine("vm"))
    assert nics.rdma == () and nics.netdevs == {}


# --- labels ------------------------------------------------------------------------------------

L = Label
HW_LABELS: dict[str, dict[str, str]] = {
    # nccl #1264: every GPU PIX to its own NIC; 4 GPUs per socket; 10 RDMA functions.
    "hgx-h100": {
        L.MAX_CPUS_PER_NUMA_NODE: "112", L.MAX_MEMORY_GIB_PER_NUMA_NODE: "984",
        L.CPU_SOCKETS: "2", L.NUMA_NODES: "2", L.GPUS: "8", L.GPU_NUMA_NODES: "2",
        L.MAX_GPUS_PER_NUMA_NODE: "4", L.GPU_PCI_SWITCHES: "8", L.MAX_GPUS_PER_PCI_SWITCH: "1",
        L.RDMA_NICS: "10", L.GPU_NIC_PAIRS: "8", L.GPU_NIC_LINK: "PIX",
    },
    "dgx-h100": {
        L.MAX_CPUS_PER_NUMA_NODE: "112", L.MAX_MEMORY_GIB_PER_NUMA_NODE: "984",
        L.CPU_SOCKETS: "2", L.NUMA_NODES: "2", L.GPUS: "8", L.GPU_NUMA_NODES: "2",
        L.MAX_GPUS_PER_NUMA_NODE: "4", L.GPU_PCI_SWITCHES: "8", L.MAX_GPUS_PER_PCI_SWITCH: "1",
        L.RDMA_NICS: "12", L.GPU_NIC_PAIRS: "8", L.GPU_NIC_LINK: "PIX",
    },
    # nccl #1505: NPS4, GPU pairs on NUMA 3/1/7/5, each GPU PXB to two NICs.
    "dgx-a100": {
        L.MAX_CPUS_PER_NUMA_NODE: "32", L.MAX_MEMORY_GIB_PER_NUMA_NODE: "125",
        L.CPU_SOCKETS: "2", L.NUMA_NODES: "8", L.GPUS: "8", L.GPU_NUMA_NODES: "4",
        L.MAX_GPUS_PER_NUMA_NODE: "2", L.GPU_PCI_SWITCHES: "8", L.MAX_GPUS_PER_PCI_SWITCH: "1",
        L.RDMA_NICS: "12", L.GPU_NIC_PAIRS: "8", L.GPU_NIC_LINK: "PXB",
    },
    # nccl #933: every GPU PIX to a NIC whose name alternates sockets; NIC0 is NODE/SYS only.
    "hgx-a800": {
        L.MAX_CPUS_PER_NUMA_NODE: "96", L.MAX_MEMORY_GIB_PER_NUMA_NODE: "503",
        L.CPU_SOCKETS: "2", L.NUMA_NODES: "2", L.GPUS: "8", L.GPU_NUMA_NODES: "2",
        L.MAX_GPUS_PER_NUMA_NODE: "4", L.GPU_PCI_SWITCHES: "8", L.MAX_GPUS_PER_PCI_SWITCH: "1",
        L.RDMA_NICS: "9", L.GPU_NIC_PAIRS: "8", L.GPU_NIC_LINK: "PIX",
    },
    # No switch at all: nothing pairs; the GPU without a NIC on its host bridge reaches NODE.
    "pcie-server": {
        L.MAX_CPUS_PER_NUMA_NODE: "64", L.MAX_MEMORY_GIB_PER_NUMA_NODE: "251",
        L.CPU_SOCKETS: "2", L.NUMA_NODES: "2", L.GPUS: "4", L.GPU_NUMA_NODES: "2",
        L.MAX_GPUS_PER_NUMA_NODE: "2", L.GPU_PCI_SWITCHES: "0", L.MAX_GPUS_PER_PCI_SWITCH: "0",
        L.RDMA_NICS: "2", L.GPU_NIC_PAIRS: "0", L.GPU_NIC_LINK: "NODE",
    },
    # numa_node -1 on a one-node machine is node 0; the HDMI audio functions are no GPUs.
    "workstation": {
        L.MAX_CPUS_PER_NUMA_NODE: "32", L.MAX_MEMORY_GIB_PER_NUMA_NODE: "125",
        L.CPU_SOCKETS: "1", L.NUMA_NODES: "1", L.GPUS: "2", L.GPU_NUMA_NODES: "1",
        L.MAX_GPUS_PER_NUMA_NODE: "2", L.GPU_PCI_SWITCHES: "0", L.MAX_GPUS_PER_PCI_SWITCH: "0",
        L.RDMA_NICS: "1", L.GPU_NIC_PAIRS: "0", L.GPU_NIC_LINK: "PHB",
    },
    # No GPU, no RDMA: counts are 0 and there is no link word to state; no node directory,
    # so one NUMA node holds every CPU and its memory is unknown.
    "vm": {
        L.MAX_CPUS_PER_NUMA_NODE: "8",
        L.CPU_SOCKETS: "1", L.NUMA_NODES: "1", L.GPUS: "0", L.GPU_NUMA_NODES: "0",
        L.MAX_GPUS_PER_NUMA_NODE: "0", L.GPU_PCI_SWITCHES: "0", L.MAX_GPUS_PER_PCI_SWITCH: "0",
        L.RDMA_NICS: "0", L.GPU_NIC_PAIRS: "0",
    },
    # Each device its own root complex: same-node pairs are NODE, nothing pairs.
    "hyperv-gpu-vm": {
        L.MAX_CPUS_PER_NUMA_NODE: "24", L.MAX_MEMORY_GIB_PER_NUMA_NODE: "221",
        L.CPU_SOCKETS: "2", L.NUMA_NODES: "2", L.GPUS: "2", L.GPU_NUMA_NODES: "2",
        L.MAX_GPUS_PER_NUMA_NODE: "1", L.GPU_PCI_SWITCHES: "0", L.MAX_GPUS_PER_PCI_SWITCH: "0",
        L.RDMA_NICS: "2", L.GPU_NIC_PAIRS: "0", L.GPU_NIC_LINK: "NODE",
    },
}  # fmt: skip


@pytest.mark.parametrize("name", HW_LABELS)
def test_labels_match_public_topology(
    name: str, built_machine: Machine, options: Callable[..., DiscoveryOptions]
) -> None:
    result = discover(options(built_machine(name)))
    assert dict(result.labels) == HW_LABELS[name]
    for key, value in result.labels.items():
        assert is_owned_key(key) and is_label_key(key) and is_label_value(value)


def test_per_device_labels_pair_gpus_as_the_dgx_h100_guide(
    built_machine: Machine, options: Callable[..., DiscoveryOptions]
) -> None:
    # DGX H100 user guide, table 6: GPU → default RDMA device.
    guide = ["mlx5_0", "mlx5_3", "mlx5_4", "mlx5_5", "mlx5_6", "mlx5_9", "mlx5_10", "mlx5_11"]
    plain = discover(options(built_machine("dgx-h100")))
    labels = discover(options(built_machine("dgx-h100"), per_device_labels=True)).labels
    assert [labels[f"topoplace.io/gpu-{i}-nic"] for i in range(8)] == guide
    assert {labels[f"topoplace.io/gpu-{i}-nic-link"] for i in range(8)} == {"PIX"}
    assert [labels[f"topoplace.io/gpu-{i}-numa-node"] for i in range(8)] == ["0"] * 4 + ["1"] * 4
    assert not any(key.startswith("topoplace.io/gpu-0-") for key in plain.labels)


def test_annotation_is_compact_json_of_the_topology(
    built_machine: Machine, options: Callable[..., DiscoveryOptions]
) -> None:
    result = discover(options(built_machine("dgx-a100")))
    assert set(result.annotations) == {TOPOLOGY_ANNOTATION}
    text = result.annotations[TOPOLOGY_ANNOTATION]
    assert ", " not in text and ": " not in text and "\n" not in text
    doc = json.loads(text)
    assert [g["pci"] for g in doc["gpus"]][:2] == ["0000:07:00.0", "0000:0f:00.0"]
    assert doc["gpus"][0]["numa"] == 3 and doc["gpus"][0]["switch"] == "0000:03:00.0"
    assert doc["nics"][0] == {
        "name": "mlx5_0", "pci": "0000:0c:00.0", "numa": 3, "switch": "0000:08:00.0",
        "rootComplex": "pci0000:00", "netdevs": ["ibp12s0"],
    }  # fmt: skip
    assert [n["id"] for n in doc["numaNodes"]] == list(range(8))
    assert doc["numaNodes"][3]["cpus"] == "48-63,176-191"
    assert {n["memoryKiB"] for n in doc["numaNodes"]} == {1056323328 // 8}
    assert doc["gpuNicLinks"][0][:2] == ["PXB", "PXB"]
    assert len(doc["gpuNicPairs"]) == 8


# --- the `nvidia-smi topo -m` matrix ------------------------------------------------------------

# GPU×NIC cells, CPU Affinity and NUMA Affinity as printed by the real machines (GPU×GPU
# columns dropped): NVIDIA/nccl issue #1264 (HGX H100) and #1505 (DGX A100, first rows).
HGX_H100_TOPO = """
GPU0 PIX  SYS  SYS  SYS  SYS  SYS  SYS  SYS  SYS  SYS  0-55,112-167   0
GPU1 SYS  PIX  SYS  SYS  SYS  SYS  SYS  SYS  SYS  SYS  0-55,112-167   0
GPU2 SYS  SYS  PIX  SYS  SYS  SYS  SYS  SYS  SYS  SYS  0-55,112-167   0
GPU3 SYS  SYS  SYS  SYS  SYS  PIX  SYS  SYS  SYS  SYS  0-55,112-167   0
GPU4 SYS  SYS  SYS  SYS  SYS  SYS  PIX  SYS  SYS  SYS  56-111,168-223 1
GPU5 SYS  SYS  SYS  SYS  SYS  SYS  SYS  PIX  SYS  SYS  56-111,168-223 1
GPU6 SYS  SYS  SYS  SYS  SYS  SYS  SYS  SYS  PIX  SYS  56-111,168-223 1
GPU7 SYS  SYS  SYS  SYS  SYS  SYS  SYS  SYS  SYS  PIX  56-111,168-223 1
"""
# Columns NIC0..NIC4 and NIC11 only, as the issue quotes them.
DGX_A100_TOPO = """
GPU0 PXB  PXB  SYS  SYS  SYS  SYS   48-63,176-191  3
GPU1 PXB  PXB  SYS  SYS  SYS  SYS   48-63,176-191  3
GPU2 SYS  SYS  PXB  PXB  SYS  SYS   16-31,144-159  1
GPU3 SYS  SYS  PXB  PXB  SYS  SYS   16-31,144-159  1
"""
# nccl #933 (HGX A800), rows GPU0–GPU5 as quoted in full.
HGX_A800_TOPO = """
GPU0 NODE SYS  PIX  SYS  NODE SYS  NODE SYS  NODE 0-47,96-143   0
GPU1 NODE SYS  NODE SYS  PIX  SYS  NODE SYS  NODE 0-47,96-143   0
GPU2 NODE SYS  NODE SYS  NODE SYS  PIX  SYS  NODE 0-47,96-143   0
GPU3 NODE SYS  NODE SYS  NODE SYS  NODE SYS  PIX  0-47,96-143   0
GPU4 SYS  PIX  SYS  NODE SYS  NODE SYS  NODE SYS  48-95,144-191 1
GPU5 SYS  NODE SYS  PIX  SYS  NODE SYS  NODE SYS  48-95,144-191 1
"""


def _reference(text: str) -> dict[str, list[str]]:
    return {line.split()[0]: line.split()[1:] for line in text.strip().splitlines()}


def _printed_matrix(stdout: str) -> dict[str, dict[str, str]]:
    """Parse the table's matrix: row label → {column header → cell}."""
    lines = stdout.splitlines()
    start = next(i for i, line in enumerate(lines) if line.lstrip().startswith("NIC0"))
    header = ["NIC" + c for c in lines[start].split("NIC")[1:]]
    columns = [h.split()[0] for h in header] + ["CPU Affinity", "NUMA Affinity"]
    rows: dict[str, dict[str, str]] = {}
    for line in lines[start + 1 :]:
        if not line.startswith("GPU"):
            break
        cells = line.split()
        rows[cells[0]] = dict(zip(columns, cells[1:], strict=True))
    return rows


def _table(python: str, repo_root: Path, root: Path) -> str:
    proc = subprocess.run(
        [python, "-m", "agent", "discover", "--sysfs-root", str(root), "--no-nvml",
         "--dataset-root", str(root.parent / "none"), "--output", "table"],
        capture_output=True, text=True, cwd=repo_root, env={"PYTHONPATH": str(repo_root)},
        check=True, timeout=60,
    )  # fmt: skip
    return proc.stdout


def test_table_matrix_equals_nvidia_smi_for_hgx_h100(
    python: str, repo_root: Path, built_machine: Machine
) -> None:
    printed = _printed_matrix(_table(python, repo_root, built_machine("hgx-h100")))
    columns = [f"NIC{i}" for i in range(10)] + ["CPU Affinity", "NUMA Affinity"]
    expected = {gpu: dict(zip(columns, cells, strict=True)) for gpu, cells in
                _reference(HGX_H100_TOPO).items()}  # fmt: skip
    assert printed == expected


def test_table_matrix_equals_nvidia_smi_for_dgx_a100(
    python: str, repo_root: Path, built_machine: Machine
) -> None:
    printed = _printed_matrix(_table(python, repo_root, built_machine("dgx-a100")))
    columns = ["NIC0", "NIC1", "NIC2", "NIC3", "NIC4", "NIC11", "CPU Affinity", "NUMA Affinity"]
    for gpu, cells in _reference(DGX_A100_TOPO).items():
        assert {c: printed[gpu][c] for c in columns} == dict(zip(columns, cells, strict=True))
    assert len(printed) == 8


def test_table_matrix_equals_nvidia_smi_for_hgx_a800(
    python: str, repo_root: Path, built_machine: Machine
) -> None:
    printed = _printed_matrix(_table(python, repo_root, built_machine("hgx-a800")))
    columns = [f"NIC{i}" for i in range(9)] + ["CPU Affinity", "NUMA Affinity"]
    for gpu, cells in _reference(HGX_A800_TOPO).items():
        assert printed[gpu] == dict(zip(columns, cells, strict=True))


def test_json_output_has_labels_annotations_topology(
    python: str, repo_root: Path, built_machine: Machine
) -> None:
    root = built_machine("pcie-server")
    proc = subprocess.run(
        [python, "-m", "agent", "discover", "--sysfs-root", str(root), "--no-nvml",
         "--dataset-root", str(root.parent / "none"), "--output", "json"],
        capture_output=True, text=True, cwd=repo_root, env={"PYTHONPATH": str(repo_root)},
        check=True, timeout=60,
    )  # fmt: skip
    doc = json.loads(proc.stdout)
    assert set(doc) == {"labels", "annotations", "topology"}
    assert doc["labels"] == HW_LABELS["pcie-server"]
    assert json.loads(doc["annotations"][TOPOLOGY_ANNOTATION]) == doc["topology"]
    assert doc["topology"]["gpuNicLinks"] == [
        ["PHB", "SYS"],
        ["NODE", "SYS"],
        ["SYS", "PHB"],
        ["SYS", "NODE"],
    ]
