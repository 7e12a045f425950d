"""What a simulated node's kubelet and device plugins are shown of a machine: derived from the
sysfs tree the agent reads, so the kubelet's managers and our labels describe one machine."""

from __future__ import annotations

from pathlib import Path

import pytest

from e2e.nodes.devices import device_plugins
from e2e.nodes.view import NodeSetupError, write_view
from tests.agent.discovery import machines


def _numa_of(view_system: Path, node: int) -> list[int]:
    return sorted(int(p.name[3:]) for p in (view_system / "node" / f"node{node}").glob("cpu[0-9]*"))


def test_dgx_h100_view_has_what_cadvisor_reads(tmp_path: Path) -> None:
    sysfs = machines.build("dgx-h100", tmp_path / "sys")
    view = write_view(sysfs, 2063937144, tmp_path / "view")
    assert (view.cpus, view.numa_nodes) == (224, (0, 1))
    node0 = view.system / "node" / "node0"
    # cpu links resolve to the CPU's own directory, as kernfs lays them out
    assert (node0 / "cpu112" / "topology" / "core_id").read_text().strip() == "0"
    assert _numa_of(view.system, 0) == [*range(0, 56), *range(112, 168)]
    assert (node0 / "distance").read_text().split() == ["10", "21"]
    assert "Node 0 MemTotal:       1031968572 kB" in (node0 / "meminfo").read_text()
    assert (node0 / "hugepages" / "hugepages-1048576kB" / "nr_hugepages").read_text() == "0\n"
    cpuinfo = view.cpuinfo.read_text()
    assert cpuinfo.count("processor\t:") == 224
    assert "physical id\t: 1" in cpuinfo and "cpu cores\t: 56" in cpuinfo
    assert view.meminfo.read_text().startswith("MemTotal:       2063937144 kB\n")


def test_nps4_nodes_on_one_socket_are_nearer_than_across(tmp_path: Path) -> None:
    view = write_view(machines.build("dgx-a100", tmp_path / "sys"), 2**30, tmp_path / "view")
    assert len(view.numa_nodes) == 8
    distances = (view.system / "node" / "node0" / "distance").read_text().split()
    assert distances == ["10", "12", "12", "12", "21", "21", "21", "21"]


def test_a_vm_without_numa_directories_gets_node0_with_every_cpu(tmp_path: Path) -> None:
    view = write_view(machines.build("vm", tmp_path / "sys"), 32827840, tmp_path / "view")
    assert view.numa_nodes == (0,)
    assert _numa_of(view.system, 0) == list(range(8))


def test_a_tree_without_cpu_topology_is_refused_naming_the_file(tmp_path: Path) -> None:
    sysfs = machines.build("pcie-l40s", tmp_path / "sys")
    missing = sysfs / "devices" / "system" / "cpu" / "cpu5" / "topology" / "core_id"
    missing.unlink()
    with pytest.raises(NodeSetupError, match=str(missing)):
        write_view(sysfs, 2**20, tmp_path / "view")
    assert not (tmp_path / "view").exists()  # nothing half-written


def test_device_plugins_advertise_gpus_by_index_and_nics_by_address(tmp_path: Path) -> None:
    plugins = device_plugins(machines.build("dgx-h100", tmp_path / "sys"))
    by_name = {r["resource"]: r for r in plugins["resources"]}
    gpus = by_name["nvidia.com/gpu"]["devices"]
    assert [g["id"] for g in gpus] == [str(i) for i in range(8)]
    assert [g["numa"] for g in gpus] == [0, 0, 0, 0, 1, 1, 1, 1]
    nics = by_name["rdma/ib"]["devices"]
    assert len(nics) == 12 and all(n["id"].count(":") == 2 for n in nics)
    assert by_name["nvidia.com/gpu"]["env"] == "NVIDIA_VISIBLE_DEVICES"


def test_a_machine_without_devices_runs_no_device_plugin(tmp_path: Path) -> None:
    assert device_plugins(machines.build("vm", tmp_path / "sys")) == {"resources": []}


def test_a_tree_with_the_kernels_per_node_meminfo_keeps_it_and_sets_the_memory(
    tmp_path: Path,
) -> None:
    sysfs = machines.build("pcie-l40s", tmp_path / "sys")
    for n, kib in ((0, 300_000_000), (1, 200_000_000)):
        meminfo = sysfs / "devices" / "system" / "node" / f"node{n}" / "meminfo"
        meminfo.write_text(f"Node {n} MemTotal:       {kib} kB\nNode {n} MemFree:  1 kB\n")
    view = write_view(sysfs, 64 * 1024**2, tmp_path / "view")
    assert view.memory_kib == 500_000_000  # the tree's, not the 64Gi given
    assert view.meminfo.read_text().startswith("MemTotal:       500000000 kB\n")
    node1 = (view.system / "node" / "node1" / "meminfo").read_text()
    assert node1.startswith("Node 1 MemTotal:       200000000 kB")


def test_a_gb200_tray_shows_its_kubelet_34_nodes_of_which_2_have_cpus(tmp_path: Path) -> None:
    """cAdvisor lists every NUMA node (the kubelet counts them all); the kernel's has_cpu and
    has_memory lists say which have CPUs and which memory."""
    sysfs = machines.build("gb200-tray", tmp_path / "sys")
    view = write_view(sysfs, 2**20, tmp_path / "view")
    assert (view.cpus, view.numa_nodes) == (144, tuple(range(34)))
    node = view.system / "node"
    assert (node / "has_cpu").read_text() == "0,1\n"
    assert (node / "has_memory").read_text() == "0,1,2,10,18,26\n"
    assert _numa_of(view.system, 1) == list(range(72, 144))
    assert _numa_of(view.system, 2) == [] and (node / "node2" / "cpulist").read_text() == "\n"
    assert "Node 3 MemTotal:" in (node / "node3" / "meminfo").read_text()
    assert (node / "node33" / "hugepages" / "hugepages-2048kB" / "nr_hugepages").is_file()
    # The machine's memory: both Graces and the four GPUs' HBM (the tree's meminfo).
    assert view.memory_kib == 2 * 472 * 2**20 + 4 * 189471 * 1024
    gpus = device_plugins(sysfs)["resources"][0]
    assert [d["numa"] for d in gpus["devices"]] == [0, 0, 1, 1]  # where each GPU attaches
