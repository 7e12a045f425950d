"""The bad input of issue 49 that the other locality tests leave out. The pod is `unknown`,
never `local`, with one log line; nothing crashes; nothing the agent labels moves.

Where the rest of the list is tested:
- counters that go backwards: test_node_rates.py (unknown for the window, said once);
- missing or malformed files: test_locality_audit.py::test_bad_input_is_unknown_never_local,
  test_locality_sources.py (garbled numa_stat, numa_maps page size, cpuset lists, numastat);
- cgroup v1 and v2 mixed: test_locality_audit.py::test_mixed_hierarchies_…,
  test_locality_sources.py::test_each_controller_is_found_on_its_own_version;
- a process exiting mid-read: test_locality_audit.py::test_a_process_exiting_mid_read_… (its
  numa_maps), and here (its status, after its memory was read);
- a share at the threshold: test_locality_monitor.py (hysteresis, no series flip).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from agent.audit.node_rates import RemoteRates
from agent.audit.probe import LocalityProbe
from agent.discovery.discover import DiscoveryOptions, discover
from tests.agent.audit.cgroupfs import CgroupFs, Container
from tests.agent.audit.kubelet_stub import FakeKubelet
from tests.agent.audit.test_locality_audit import (
    CID,
    NODE0_CPUS,
    UID,
    locality,
    pod_list,
    run_audit,
    trainer,
)

GARBLED_NUMASTAT = "numa_hit 12\nnuma_miss\nlocal_node -\nother_node 0x1f\n"


@pytest.fixture
def h100(fresh_machine: Callable[[str], Path]) -> Path:
    return fresh_machine("dgx-h100")


def test_a_process_gone_before_its_status_is_read_is_unknown(
    h100: Path, tmp_path: Path, kubelet: FakeKubelet, audit_json: Any
) -> None:
    """No pod cgroup: its memory was summed from numa_maps, then the process exited before its
    allowed CPUs were read. Half a reading is no reading."""
    proc = tmp_path / "proc"
    fs = CgroupFs(h100, proc, memory=None, cpuset=None)
    fs.add_pod(UID, [Container(CID, NODE0_CPUS, [0], pids=[101])], cgroups=False,
               proc_pages={101: {0: 9000}})  # fmt: skip
    (proc / "101/status").unlink()
    kubelet.serve(trainer())
    got = locality(run_audit(audit_json, h100, kubelet, proc, "--pods", str(pod_list(tmp_path))))
    assert got["verdict"] == "unknown" and got["memoryShare"] is None, got
    assert "/101/status: missing" in got["reason"] and "the next audit retries" in got["reason"]


def test_garbled_node_counters_are_said_once_and_leave_the_node_unknown(
    h100: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    fs = CgroupFs(h100, tmp_path / "proc")
    fs.numastat(0, local=1_000_000, other=0)
    (h100 / "devices/system/node/node1/numastat").write_text(GARBLED_NUMASTAT)
    clock = [0.0]
    probe = LocalityProbe(sysfs_root=h100, proc_root=tmp_path / "proc",
                          rates=RemoteRates(clock=lambda: clock[0]))  # fmt: skip
    topology = discover(DiscoveryOptions(sysfs_root=h100, use_nvml=False)).topology
    reports = []
    with caplog.at_level(logging.WARNING):
        for step in range(4):
            clock[0] = 60.0 * step
            fs.numastat(0, local=1_000_000 + 100_000 * step, other=10_000 * step)
            reports.append(probe.measure(topology, [], []))
    said = [r.getMessage() for r in caplog.records if "counters unreadable" in r.getMessage()]
    assert len(said) == 1 and "node1/numastat" in said[0], said
    assert 1 not in reports[-1].node_remote  # no figure for the garbled node, never 0 %
    assert reports[-1].node_remote[0] == pytest.approx(10_000 / 110_000)


def test_bad_locality_input_moves_no_label(h100: Path, tmp_path: Path) -> None:
    """Labels and the topology annotation come from discovery alone: garbled counters and
    cgroup files, and a pod's processes gone, leave them as they were."""
    options = DiscoveryOptions(sysfs_root=h100, use_nvml=False)
    before = discover(options)
    fs = CgroupFs(h100, tmp_path / "proc", memory=1, cpuset=2)
    fs.add_pod(UID, [Container(CID, NODE0_CPUS, [0], pids=[101])], memory_bytes={0: 1 << 30})
    for node in (0, 1):
        (h100 / f"devices/system/node/node{node}/numastat").write_text(GARBLED_NUMASTAT)
    for stat in (h100 / "fs/cgroup").rglob("memory.numa_stat"):
        stat.write_text("total=x N0=\n")
    (tmp_path / "proc/101/numa_maps").write_text("")
    after = discover(options)
    assert (after.labels, after.annotations) == (before.labels, before.annotations)
