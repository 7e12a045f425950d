"""Damaged sysfs never crashes discovery: the affected device is skipped with a log line and
everything else is still reported."""

from __future__ import annotations

import logging
import os
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agent.discovery.discover import DiscoveryError, DiscoveryOptions, discover
from common.k8s_names import is_label_key, is_label_value
from common.vocabulary import Label

Machine = Callable[[str], Path]
Options = Callable[..., DiscoveryOptions]

GPU0 = "0000:01:00.0"  # the workstation's first GPU
WS_GPU0 = f"devices/pci0000:00/0000:00:01.1/{GPU0}"


def _write(path: Path, text: str) -> None:
    path.write_text(text)


def _move_off_pci(root: Path) -> None:
    """The GPU's directory, whole, somewhere no PCI host bridge is above it."""
    (root / "devices/platform").mkdir()
    shutil.move(root / WS_GPU0, root / "devices/platform" / GPU0)
    (root / "bus/pci/devices" / GPU0).unlink()
    os.symlink(f"../../../devices/platform/{GPU0}", root / "bus/pci/devices" / GPU0)


@pytest.mark.parametrize(
    ("damage", "message"),
    [
        (lambda r: _write(r / WS_GPU0 / "class", ""), "empty"),
        (lambda r: _write(r / WS_GPU0 / "vendor", "0xzz\n"), "not a number"),
        (lambda r: _write(r / WS_GPU0 / "device", "\x00\xff garbage"), "not a number"),
        (lambda r: (r / WS_GPU0 / "class").unlink(), "missing"),
        (lambda r: shutil.rmtree(r / WS_GPU0), "dangling"),
        (lambda r: _move_off_pci(r), "no pci host bridge"),
    ],
    ids=["empty-class", "garbage-vendor", "garbage-device", "missing-class", "dangling-link",
         "link-outside-pci"],
)  # fmt: skip
def test_broken_gpu_is_skipped_with_a_log_line(
    damage: Callable[[Path], object],
    message: str,
    fresh_machine: Machine,
    options: Options,
    caplog: pytest.LogCaptureFixture,
) -> None:
    root = fresh_machine("workstation")
    damage(root)
    with caplog.at_level(logging.WARNING):
        result = discover(options(root))
    assert result.labels[Label.GPUS] == "1"
    assert [g.bdf for g in result.topology.gpus] == ["0000:02:00.0"]
    assert result.labels[Label.RDMA_NICS] == "1"  # the rest is still reported
    lines = [r.getMessage() for r in caplog.records if GPU0 in r.getMessage()]
    assert lines and message in lines[0]


def test_garbage_numa_node_makes_the_gpu_numa_unknown(
    fresh_machine: Machine, options: Options, caplog: pytest.LogCaptureFixture
) -> None:
    root = fresh_machine("pcie-server")
    _write(root / "devices/pci0000:17/0000:17:02.0/0000:18:00.0/numa_node", "zero\n")
    with caplog.at_level(logging.WARNING):
        labels = discover(options(root)).labels
    assert labels[Label.GPUS] == "4"  # kept: the GPU is there, only its node is unknown
    assert Label.GPU_NUMA_NODES not in labels and Label.MAX_GPUS_PER_NUMA_NODE not in labels
    assert any("0000:18:00.0" in r.getMessage() for r in caplog.records)


def test_broken_cpu_attributes_skip_that_cpu(
    fresh_machine: Machine, options: Options, caplog: pytest.LogCaptureFixture
) -> None:
    root = fresh_machine("vm")
    _write(root / "devices/system/cpu/cpu7/topology/physical_package_id", "")
    _write(root / "devices/system/cpu/cpu6/topology/thread_siblings_list", "6-x")
    with caplog.at_level(logging.WARNING):
        topo = discover(options(root)).topology
    assert topo.sockets[0].cpus == frozenset(range(7))
    messages = " ".join(r.getMessage() for r in caplog.records)
    assert "CPU 7" in messages and "CPU 6" in messages


def test_garbage_online_list_falls_back_to_cpu_directories(
    fresh_machine: Machine, options: Options, caplog: pytest.LogCaptureFixture
) -> None:
    root = fresh_machine("vm")
    _write(root / "devices/system/cpu/online", "lots\n")
    with caplog.at_level(logging.INFO):
        topo = discover(options(root)).topology
    assert topo.online_cpus == frozenset(range(8))
    assert any("online" in r.getMessage() for r in caplog.records)


def test_broken_numa_node_is_skipped(
    fresh_machine: Machine, options: Options, caplog: pytest.LogCaptureFixture
) -> None:
    root = fresh_machine("pcie-server")
    _write(root / "devices/system/node/node1/cpulist", "32-")
    with caplog.at_level(logging.WARNING):
        labels = discover(options(root)).labels
    assert labels[Label.NUMA_NODES] == "1"
    assert labels[Label.CPU_SOCKETS] == "2"
    assert any("node1" in r.getMessage() for r in caplog.records)


def test_missing_node_directory_means_one_numa_node(
    fresh_machine: Machine, options: Options
) -> None:
    root = fresh_machine("workstation")
    shutil.rmtree(root / "devices/system/node")
    labels = discover(options(root)).labels
    assert labels[Label.NUMA_NODES] == "1"
    assert labels[Label.GPU_NUMA_NODES] == "1"  # -1 on a one-node machine is that node
    assert labels[Label.MAX_CPUS_PER_NUMA_NODE] == "32"  # node 0 holds every CPU
    assert Label.MAX_MEMORY_GIB_PER_NUMA_NODE not in labels  # no node meminfo to read


NODE1_MEMINFO = "devices/system/node/node1/meminfo"


@pytest.mark.parametrize(
    ("damage", "message"),
    [
        (lambda r: _write(r / NODE1_MEMINFO, "Node 1 MemTotal:  lots kB\n"), "bad MemTotal"),
        (lambda r: _write(r / NODE1_MEMINFO, "Node 1 MemTotal:  5 MB\n"), "bad MemTotal"),
        (lambda r: _write(r / NODE1_MEMINFO, "Node 0 MemTotal:  5 kB\n"), "no 'Node 1 MemTotal:'"),
        (lambda r: _write(r / NODE1_MEMINFO, "\x00\xff"), "no 'Node 1 MemTotal:'"),
        (lambda r: _write(r / NODE1_MEMINFO, ""), "empty"),
        (lambda r: (r / NODE1_MEMINFO).unlink(), "missing"),
    ],
    ids=["garbage-number", "wrong-unit", "other-node", "binary", "empty", "missing"],
)  # fmt: skip
def test_unreadable_node_meminfo_makes_numa_memory_unknown(
    damage: Callable[[Path], object],
    message: str,
    fresh_machine: Machine,
    options: Options,
    caplog: pytest.LogCaptureFixture,
) -> None:
    root = fresh_machine("pcie-server")
    damage(root)
    with caplog.at_level(logging.WARNING):
        result = discover(options(root))
    # Node 0 alone could understate the largest node: the label is left out, not guessed.
    assert Label.MAX_MEMORY_GIB_PER_NUMA_NODE not in result.labels
    assert result.labels[Label.MAX_CPUS_PER_NUMA_NODE] == "64"  # the rest is still reported
    assert [n.memory_kib for n in result.topology.numa_nodes] == [264080832, None]
    lines = [r.getMessage() for r in caplog.records if "node1" in r.getMessage()]
    assert lines and message in lines[0]


def test_memory_only_node_does_not_count_for_memory_or_cpus(
    fresh_machine: Machine, options: Options
) -> None:
    from tests.agent.discovery.sysfs_builder import node_meminfo

    root = fresh_machine("pcie-server")
    cxl = root / "devices/system/node/node2"
    cxl.mkdir()
    _write(cxl / "cpulist", "\n")
    _write(cxl / "meminfo", node_meminfo(2, 4 * 2**30))  # a 4 TiB CXL expander
    labels = discover(options(root)).labels
    assert labels[Label.NUMA_NODES] == "2"
    assert labels[Label.MAX_CPUS_PER_NUMA_NODE] == "64"
    assert labels[Label.MAX_MEMORY_GIB_PER_NUMA_NODE] == "251"


def test_dangling_rdma_device_link_is_skipped(
    fresh_machine: Machine, options: Options, caplog: pytest.LogCaptureFixture
) -> None:
    root = fresh_machine("pcie-server")
    device = root / "class/infiniband/mlx5_1/device"
    target = os.readlink(device)
    device.unlink()
    os.symlink(target.replace("0000:9a:00.0", "0000:9a:00.7"), device)
    with caplog.at_level(logging.WARNING):
        labels = discover(options(root)).labels
    assert labels[Label.RDMA_NICS] == "1"
    assert any("mlx5_1" in r.getMessage() for r in caplog.records)


@pytest.mark.parametrize("missing", ["class/infiniband", "class", "bus/pci", "bus"])
def test_missing_directories_are_empty_not_fatal(
    missing: str, fresh_machine: Machine, options: Options
) -> None:
    root = fresh_machine("workstation")
    shutil.rmtree(root / missing)
    labels = discover(options(root)).labels
    assert labels[Label.CPU_SOCKETS] == "1"
    assert labels[Label.RDMA_NICS] == "0"
    assert Label.GPU_NIC_LINK not in labels


def test_virtual_functions_are_not_counted(fresh_machine: Machine, options: Options) -> None:
    from tests.agent.discovery.sysfs_builder import PciNode, SysfsBuilder

    root = fresh_machine("workstation")
    b = SysfsBuilder(root)
    rp = PciNode(bdf="0000:00:02.1", path=root / "devices/pci0000:00/0000:00:02.1", numa=-1)
    pf = PciNode(bdf="0000:03:00.0", path=rp.path / "0000:03:00.0", numa=-1)
    for i in range(2):
        vf = b.virtual_function(
            pf, rp, 0x03, 0, 2 + i, vendor=0x15B3, device=0x101C, cls=0x020700, index=i
        )
        b.rdma(vf, f"ibp3s0v{i}")
    labels = discover(options(root)).labels
    assert labels[Label.RDMA_NICS] == "1"


def test_empty_root_is_an_error(tmp_path: Path, options: Options) -> None:
    with pytest.raises(DiscoveryError, match="--sysfs-root"):
        discover(options(tmp_path))
    with pytest.raises(DiscoveryError, match="not a directory"):
        discover(options(tmp_path / "absent"))


def test_cli_reports_an_unreadable_root_and_exits_non_zero(
    python: str, repo_root: Path, tmp_path: Path
) -> None:
    proc = subprocess.run(
        [python, "-m", "agent", "discover", "--sysfs-root", str(tmp_path / "nope"), "--no-nvml"],
        capture_output=True, text=True, cwd=repo_root, env={"PYTHONPATH": str(repo_root)},
        timeout=60,
    )  # fmt: skip
    assert proc.returncode == 1
    assert proc.stdout == ""
    assert "--sysfs-root" in proc.stderr and "Traceback" not in proc.stderr


def _entries(root: Path) -> list[str]:
    """Every file and link in the tree, relative, without following links."""
    out: list[str] = []
    for dirpath, dirnames, filenames in os.walk(root):
        rel = os.path.relpath(dirpath, root)
        out += [os.path.normpath(os.path.join(rel, n)) for n in filenames]
        out += [os.path.normpath(os.path.join(rel, n)) for n in dirnames
                if os.path.islink(os.path.join(dirpath, n))]  # fmt: skip
    return sorted(out)


_GARBAGE = st.sampled_from(["", "-1", "0x", "9" * 30, "0-", "1-0", "\x00", "nan", "0x10de 0x10de"])


@pytest.fixture
def fuzz_tree(fresh_machine: Machine) -> tuple[Path, list[str]]:
    """One tree for the fuzz test alone (built once, not per example) and its entries."""
    root = fresh_machine("workstation")
    return root, _entries(root)


@settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(data=st.data())
def test_random_damage_never_crashes(
    data: st.DataObject, fuzz_tree: tuple[Path, list[str]], options: Options
) -> None:
    # Each example damages up to 8 files or links, then puts every victim back.
    root, entries = fuzz_tree
    victims = data.draw(st.lists(st.sampled_from(entries), min_size=1, max_size=8, unique=True))
    saved: list[tuple[Path, str | None, bytes]] = []
    try:
        for rel in victims:
            path = root / rel
            if path.is_symlink():
                saved.append((path, os.readlink(path), b""))
            else:
                saved.append((path, None, path.read_bytes()))
            action = data.draw(st.sampled_from(["garbage", "bytes", "delete", "dangle"]))
            was_link = path.is_symlink()
            path.unlink()
            if action == "dangle" or (was_link and action != "delete"):
                os.symlink("../nowhere/0000:ff:1f.7", path)
            elif action == "garbage":
                path.write_text(data.draw(_GARBAGE))
            elif action == "bytes":
                path.write_bytes(data.draw(st.binary(max_size=24)))
        try:
            result = discover(options(root))
        except DiscoveryError:
            return  # only when nothing at all was left readable
        for key, value in result.labels.items():
            assert is_label_key(key) and is_label_value(value), (key, value)
        assert int(result.labels[Label.GPUS]) <= 2
    finally:
        for path, target, content in reversed(saved):
            if path.is_symlink() or path.exists():
                path.unlink()
            if target is not None:
                os.symlink(target, path)
            else:
                path.write_bytes(content)
