"""`topoplace-agent audit` measures where each GPU pod's memory really is: the kubelet's
assignment (real PodResources gRPC), the DGX H100's kernel-faithful sysfs, and the pod's
cgroups and processes as the kernel lays them out. The locality verdict stands apart from the
container verdicts; anything it cannot trust is `unknown`, never `local`, said once."""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.agent.audit.cgroupfs import PAGE, CgroupFs, Container
from tests.agent.audit.kubelet_stub import FakeKubelet, container, devices, pod

GiB = 1 << 30
UID = "0c6f3a49-7b8e-4f53-9d0e-3f4c2b1a9e77"
CID = "4f1d2c3b5a6e7f8091a2b3c4d5e6f708192a3b4c5d6e7f8091a2b3c4d5e6f70"
SANDBOX = "9e9e9e9e5a6e7f8091a2b3c4d5e6f708192a3b4c5d6e7f8091a2b3c4d5e6f70"
NODE0_GPUS = ["0000:1b:00.0", "0000:43:00.0", "0000:52:00.0", "0000:61:00.0"]
NODE0_CPUS = list(range(4, 56))
ALL_CPUS = list(range(224))


def trainer(cpus: list[int] = NODE0_CPUS) -> Any:
    gpus = devices("nvidia.com/gpu", NODE0_GPUS, [0])
    return pod("ml", "train-0", container("trainer", gpus, cpus=cpus))


def pod_list(tmp_path: Path, *, container_id: str | None = CID) -> Path:
    status: dict[str, Any] = {"phase": "Running"}
    if container_id:
        status["containerStatuses"] = [
            {"name": "trainer", "containerID": f"containerd://{container_id}"}
        ]
    item = {"metadata": {"namespace": "ml", "name": "train-0", "uid": UID}, "status": status}
    path = tmp_path / "pods.json"
    path.write_text(json.dumps({"apiVersion": "v1", "kind": "PodList", "items": [item]}))
    return path


@pytest.fixture
def h100(fresh_machine: Callable[[str], Path]) -> Path:
    return fresh_machine("dgx-h100")


def locality(doc: dict[str, Any]) -> dict[str, Any]:
    (entry,) = doc["locality"]["pods"]
    return entry


def run_audit(audit_json: Any, root: Path, kubelet: FakeKubelet, proc: Path, *flags: str) -> Any:
    rc, doc, err = audit_json(root, kubelet.socket, "--proc-root", str(proc), *flags)
    assert rc == 0, err
    return doc


def test_memory_on_the_far_socket_is_remote_while_the_assignment_is_aligned(
    h100: Path, tmp_path: Path, kubelet: FakeKubelet, audit_json: Any
) -> None:
    fs = CgroupFs(h100, tmp_path / "proc")
    fs.add_pod(UID, [Container(CID, NODE0_CPUS, [0, 1]), Container(SANDBOX, ALL_CPUS, [0, 1])],
               memory_bytes={0: 6 * GiB, 1: 54 * GiB})  # fmt: skip
    kubelet.serve(trainer())
    doc = run_audit(audit_json, h100, kubelet, tmp_path / "proc", "--pods", str(pod_list(tmp_path)))
    (entry,) = doc["containers"]
    assert entry["verdict"] == "aligned", entry["reason"]  # what the kubelet assigned
    got = locality(doc)
    assert got["verdict"] == "remote", got["reason"]
    assert got["source"] == "cgroup v2"
    assert got["gpuNumaNodes"] == [0]
    # anon as set plus the v2 file rows (none here): 6 of 60 GiB on the GPUs' node.
    assert got["memoryShare"] == pytest.approx(0.1, abs=0.001)
    # Only the trainer's cgroup counts for CPUs: the sandbox's shared pool is not the pod's.
    assert got["cpuShare"] == 1.0
    assert (
        "10% of 60.0 GiB on NUMA node 0" in got["reason"] and "54.0 GiB on node 1" in got["reason"]
    )
    assert doc["locality"]["counts"] == {"local": 0, "remote": 1, "unknown": 0}
    assert doc["locality"]["threshold"] == 0.8


def test_the_threshold_flag_moves_the_verdict(
    h100: Path, tmp_path: Path, kubelet: FakeKubelet, audit_json: Any
) -> None:
    fs = CgroupFs(h100, tmp_path / "proc")
    fs.add_pod(UID, [Container(CID, NODE0_CPUS, [0])], memory_bytes={0: 7 * GiB, 1: 3 * GiB})
    kubelet.serve(trainer())
    pods = str(pod_list(tmp_path))
    assert locality(run_audit(audit_json, h100, kubelet, tmp_path / "proc", "--pods", pods))[
        "verdict"] == "remote"  # fmt: skip
    relaxed = run_audit(audit_json, h100, kubelet, tmp_path / "proc", "--pods", pods,
                        "--locality-threshold", "0.7")  # fmt: skip
    assert locality(relaxed)["verdict"] == "local"
    with pytest.raises(SystemExit) as bad:
        audit_json(h100, kubelet.socket, "--locality-threshold", "1.5")
    assert bad.value.code == 2


def test_mixed_hierarchies_memory_v1_cpuset_v2_with_the_cgroupfs_driver(
    h100: Path, tmp_path: Path, kubelet: FakeKubelet, audit_json: Any
) -> None:
    fs = CgroupFs(h100, tmp_path / "proc", memory=1, cpuset=2, driver="cgroupfs")
    fs.add_pod(UID, [Container(CID, [*NODE0_CPUS[:8], 60, 61], [0])], qos="burstable",
               memory_bytes={0: 9 * GiB, 1: 1 * GiB})  # fmt: skip
    kubelet.serve(trainer())
    got = locality(run_audit(audit_json, h100, kubelet, tmp_path / "proc",
                             "--pods", str(pod_list(tmp_path))))  # fmt: skip
    assert (got["verdict"], got["source"]) == ("local", "cgroup v1")
    assert got["memoryShare"] == pytest.approx(0.9, abs=0.001)
    assert got["cpuShare"] == pytest.approx(0.8)
    assert got["memoryBytesByNumaNode"] == {"0": 9 * GiB, "1": 1 * GiB}


def test_without_a_memory_cgroup_the_processes_numa_maps_are_summed(
    h100: Path, tmp_path: Path, kubelet: FakeKubelet, audit_json: Any
) -> None:
    proc = tmp_path / "proc"
    fs = CgroupFs(h100, proc, memory=None, cpuset=None)
    pages = {101: {0: 1000, 1: 9000}, 102: {1: 10000}}
    fs.add_pod(UID, [Container(CID, NODE0_CPUS, [0], pids=[101, 102])], proc_pages=pages)
    kubelet.serve(trainer())
    got = locality(run_audit(audit_json, h100, kubelet, proc, "--pods", str(pod_list(tmp_path))))
    assert (got["verdict"], got["source"]) == ("remote", "numa_maps")
    # The heap pages plus each process's binary, libc and stack pages (node 0).
    on0 = 1000 + 2 * (210 + 40 + 33)
    assert got["memoryBytesByNumaNode"] == {"0": on0 * PAGE, "1": 19000 * PAGE}
    assert got["cpuShare"] == 1.0


def test_a_pod_in_no_cgroup_is_measured_from_its_processes(
    h100: Path, tmp_path: Path, kubelet: FakeKubelet, audit_json: Any
) -> None:
    """A kubelet with `cgroupsPerQOS: false` (no pod cgroup, as on `make cluster`): the pod's
    processes are found by the kubelet's files their containers mount, then read as above."""
    proc = tmp_path / "proc"
    fs = CgroupFs(h100, proc, memory=2, cpuset=2)
    fs.add_pod(UID, [Container(CID, NODE0_CPUS, [0], pids=[101])], cgroups=False,
               proc_pages={101: {0: 9000, 1: 1000}})  # fmt: skip
    kubelet.serve(trainer())
    got = locality(run_audit(audit_json, h100, kubelet, proc, "--pods", str(pod_list(tmp_path))))
    assert (got["verdict"], got["source"]) == ("local", "numa_maps")
    on0 = 9000 + 210 + 40 + 33  # the heap plus the binary, libc and stack pages
    assert got["memoryBytesByNumaNode"] == {"0": on0 * PAGE, "1": 1000 * PAGE}
    assert got["cpuShare"] == 1.0


def _unknown(doc: dict[str, Any]) -> str:
    got = locality(doc)
    assert got["verdict"] == "unknown"
    assert got["memoryShare"] is None
    return str(got["reason"])


def test_a_process_exiting_mid_read_is_unknown_and_said_once(
    h100: Path,
    tmp_path: Path,
    kubelet: FakeKubelet,
    audit_json: Any,
) -> None:
    proc = tmp_path / "proc"
    fs = CgroupFs(h100, proc, memory=None, cpuset=None)
    fs.add_pod(UID, [Container(CID, NODE0_CPUS, [0], pids=[101, 102])],
               proc_pages={101: {0: 5000}, 102: {0: 5000}})  # fmt: skip
    (proc / "102/numa_maps").write_text("")  # exited after cgroup.procs listed it
    kubelet.serve(trainer())
    rc, doc, err = audit_json(h100, kubelet.socket, "--proc-root", str(proc),
                              "--pods", str(pod_list(tmp_path)))  # fmt: skip
    assert rc == 0
    assert "/102/numa_maps" in _unknown(doc) and "the next audit retries" in _unknown(doc)
    said = [line for line in err.splitlines() if "memory locality" in line]
    assert len(said) == 1 and "ml/train-0" in said[0]


@pytest.mark.parametrize(
    ("breakage", "says"),
    [
        ("garbled", "not a per-node count"),
        ("missing", "no cgroup and no process"),
        ("no-uid", "UID is not known"),
    ],
)
def test_bad_input_is_unknown_never_local(
    h100: Path, tmp_path: Path, kubelet: FakeKubelet, audit_json: Any, breakage: str, says: str
) -> None:
    fs = CgroupFs(h100, tmp_path / "proc")
    fs.add_pod(UID, [Container(CID, NODE0_CPUS, [0])], memory_bytes={0: 10 * GiB})
    stat = fs.pod_dir(h100 / "fs/cgroup", UID, "guaranteed") / "memory.numa_stat"
    flags = ["--pods", str(pod_list(tmp_path))]
    if breakage == "garbled":
        stat.write_text("anon N0=10737418240 N1=\u00bd\nfile N0=0 N1=0\n")
    elif breakage == "missing":  # the pod went between PodResources and the cgroup read
        shutil.rmtree(fs.pod_dir(h100 / "fs/cgroup", UID, "guaranteed"))
        (tmp_path / "proc").mkdir()  # nor any process left
    else:
        flags = []
    kubelet.serve(trainer())
    assert says in _unknown(run_audit(audit_json, h100, kubelet, tmp_path / "proc", *flags))


def test_the_table_shows_the_measured_locality_apart(
    h100: Path, tmp_path: Path, kubelet: FakeKubelet, capsys: pytest.CaptureFixture[str]
) -> None:
    from agent.cli.main import main

    fs = CgroupFs(h100, tmp_path / "proc")
    fs.add_pod(UID, [Container(CID, NODE0_CPUS, [0])], memory_bytes={0: 1 * GiB, 1: 3 * GiB})
    kubelet.serve(trainer())
    rc = main(["audit", "--sysfs-root", str(h100), "--no-nvml", "--pod-resources-socket",
               str(kubelet.socket), "--proc-root", str(tmp_path / "proc"),
               "--pods", str(pod_list(tmp_path))])  # fmt: skip
    out = capsys.readouterr().out
    assert rc == 0
    section = out.split("Memory locality (measured):")[1]
    assert "ml/train-0" in section and "25%" in section and "remote" in section


def _gpu_audit(pod_name: str) -> Any:
    from agent.audit.verdict import ContainerAudit

    return ContainerAudit("ml", pod_name, "trainer", "aligned", "", (), (), (), frozenset(),
                          False, frozenset({0}), frozenset(), frozenset(), ())  # fmt: skip


def test_the_numa_maps_fallback_is_bounded_per_audit_and_reread_once_a_minute(
    h100: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from agent.audit import measure
    from agent.audit.measure import PodRef
    from agent.audit.probe import LocalityProbe
    from agent.discovery.discover import DiscoveryOptions, discover

    proc = tmp_path / "proc"
    fs = CgroupFs(h100, proc, memory=None, cpuset=None)
    uids = [f"0c6f3a49-7b8e-4f53-9d0e-3f4c2b1a9e7{i}" for i in range(3)]
    for i, uid in enumerate(uids):
        fs.add_pod(uid, [Container(f"{i}" * 64, NODE0_CPUS, [0], pids=[100 + i])],
                   proc_pages={100 + i: {0: 1000}})  # fmt: skip
    size = len((proc / "100/numa_maps").read_text())
    monkeypatch.setattr(measure, "NUMA_MAPS_BUDGET", 2 * size)  # two processes' worth
    topology = discover(DiscoveryOptions(sysfs_root=h100, use_nvml=False)).topology
    refs = [PodRef("ml", f"p{i}", uid) for i, uid in enumerate(uids)]
    audits = [_gpu_audit(f"p{i}") for i in range(3)]
    now = [0.0]
    probe = LocalityProbe(sysfs_root=h100, proc_root=proc, clock=lambda: now[0])
    first = {p.pod: p for p in probe.measure(topology, audits, refs).pods}
    assert [first[p].verdict for p in ("p0", "p1", "p2")] == ["local", "local", "unknown"]
    assert "MiB of numa_maps one audit reads are spent" in first["p2"].reason
    # Within the minute the two readings are reused: the budget goes to the third pod.
    (proc / "100/numa_maps").write_text("")  # p0's process exited: not read again yet
    now[0] = 30.0
    second = {p.pod: p for p in probe.measure(topology, audits, refs).pods}
    assert [second[p].verdict for p in ("p0", "p1", "p2")] == ["local", "local", "local"]
    now[0] = 61.0  # p0's reading is a minute old: read again, and its process is gone
    third = {p.pod: p for p in probe.measure(topology, audits, refs).pods}
    assert third["p0"].verdict == "unknown" and "exited" in third["p0"].reason
