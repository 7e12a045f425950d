"""The measured locality inside `run`: per-pod series that follow the pods (three per GPU pod),
per-NUMA-node remote shares, and one log line per pod and verdict."""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry

from agent.audit.facts import AuditOptions
from agent.audit.measure import PodIndex
from agent.audit.monitor import AuditMetrics, AuditMonitor
from agent.audit.node_rates import RemoteRates
from agent.audit.probe import LocalityProbe
from agent.discovery.discover import DiscoveryOptions
from tests.agent.audit.cgroupfs import CgroupFs, Container
from tests.agent.audit.kubelet_stub import FakeKubelet, container, devices, pod

GiB = 1 << 30
UIDS = {
    "near": "11111111-2222-4333-8444-555555555555",
    "far": "66666666-7777-4888-9999-000000000000",
}


def gpu_pod(name: str, gpu: str) -> object:
    return pod("ml", name, container("w", devices("nvidia.com/gpu", [gpu], [0]), cpus=range(4, 8)))


def api_pod(name: str, *, phase: str = "Running") -> dict[str, object]:
    return {"metadata": {"namespace": "ml", "name": name, "uid": UIDS[name]},
            "status": {"phase": phase, "containerStatuses": [
                {"name": "w", "containerID": f"containerd://{name}-cid"}]}}  # fmt: skip


def series(registry: CollectorRegistry, prefix: str) -> dict[tuple[str, ...], float]:
    return {
        (s.name, *s.labels.values()): s.value
        for metric in registry.collect()
        for s in metric.samples
        if s.name.startswith(prefix)
    }


async def test_series_follow_the_pods_and_each_verdict_is_said_once(
    fresh_machine: Callable[[str], Path],
    tmp_path: Path,
    kubelet: FakeKubelet,
    caplog: pytest.LogCaptureFixture,
) -> None:
    root = fresh_machine("dgx-h100")
    fs = CgroupFs(root, tmp_path / "proc")
    fs.add_pod(
        UIDS["near"], [Container("near-cid", range(4, 8), [0])], memory_bytes={0: 9 * GiB, 1: GiB}
    )
    fs.add_pod(
        UIDS["far"], [Container("far-cid", range(4, 8), [0])], memory_bytes={0: GiB, 1: 9 * GiB}
    )
    for node in (0, 1):
        fs.numastat(node, local=1_000_000, other=0)
    index = PodIndex()
    for name in UIDS:
        index.observe(api_pod(name))
    registry = CollectorRegistry()
    options = AuditOptions(DiscoveryOptions(sysfs_root=root, use_nvml=False), socket=kubelet.socket)
    clock = [0.0]
    probe = LocalityProbe(sysfs_root=root, proc_root=tmp_path / "proc",
                          rates=RemoteRates(clock=lambda: clock[0]))  # fmt: skip
    monitor = AuditMonitor(
        options, AuditMetrics(registry), interval=60, probe=probe, refs=index.refs
    )
    kubelet.serve(gpu_pod("near", "0000:1b:00.0"), gpu_pod("far", "0000:43:00.0"))
    with caplog.at_level(logging.WARNING):
        await monitor.refresh()
        clock[0] = 60.0
        fs.numastat(0, local=1_300_000, other=100_000)
        fs.numastat(1, local=1_000_500, other=0)
        await monitor.refresh()
    said = [r.getMessage() for r in caplog.records if "memory locality" in r.getMessage()]
    assert len(said) == 1 and said[0].startswith("GPU pod ml/far: memory locality remote: 10% ")
    got = series(registry, "topoplace_agent_pod_m") | series(registry, "topoplace_agent_pod_c")
    assert got == {
        ("topoplace_agent_pod_memory_locality", "ml", "near", "local"): 1,
        ("topoplace_agent_pod_memory_locality", "ml", "far", "remote"): 1,
        ("topoplace_agent_pod_memory_local_ratio", "ml", "near"): pytest.approx(0.9, abs=1e-3),
        ("topoplace_agent_pod_memory_local_ratio", "ml", "far"): pytest.approx(0.1, abs=1e-3),
        ("topoplace_agent_pod_cpu_local_ratio", "ml", "near"): 1.0,
        ("topoplace_agent_pod_cpu_local_ratio", "ml", "far"): 1.0,
    }  # three series per GPU pod
    assert series(registry, "topoplace_agent_numa_remote") == {
        ("topoplace_agent_numa_remote_allocation_ratio", "0"): 0.25,  # node 1 idle: no figure
    }
    assert registry.get_sample_value("topoplace_agent_gpu_pods_memory_locality",
                                     {"verdict": "remote"}) == 1  # fmt: skip

    index.observe(api_pod("far", phase="Succeeded"))  # the API says it ended …
    kubelet.serve(gpu_pod("near", "0000:1b:00.0"))  # … and the kubelet no longer lists it
    await monitor.refresh()
    assert {
        k[2]
        for k in series(registry, "topoplace_agent_pod_m")
        | series(registry, "topoplace_agent_pod_c")
    } == {"near"}


def test_the_pod_index_is_bounded_and_forgets_finished_pods() -> None:
    index = PodIndex(limit=2)
    for i in range(5):
        index.observe({"metadata": {"namespace": "a", "name": f"p{i}", "uid": f"u{i}"}})
    assert [r.name for r in index.refs()] == ["p3", "p4"]
    index.observe({"metadata": {"namespace": "a", "name": "p4", "uid": "u4",
                                "deletionTimestamp": "2026-01-01T00:00:00Z"}})  # fmt: skip
    assert [r.name for r in index.refs()] == ["p3"]
    index.observe({"metadata": {"name": "no-namespace"}})
    assert len(index.refs()) == 1


def test_a_share_hovering_at_the_threshold_does_not_flip_the_verdict(
    fresh_machine: Callable[[str], Path], tmp_path: Path
) -> None:
    from agent.audit.verdict import ContainerAudit
    from agent.discovery.discover import discover
    from tests.agent.audit.cgroupfs import v2_numa_stat

    root = fresh_machine("dgx-h100")
    fs = CgroupFs(root, tmp_path / "proc")
    uid = UIDS["near"]
    fs.add_pod(uid, [Container("near-cid", range(4, 8), [0])], memory_bytes={0: GiB})
    stat = fs.pod_dir(root / "fs/cgroup", uid, "guaranteed") / "memory.numa_stat"
    topology = discover(DiscoveryOptions(sysfs_root=root, use_nvml=False)).topology
    audit = ContainerAudit("ml", "near", "w", "aligned", "", (), (), (), frozenset(), False,
                           frozenset({0}), frozenset(), frozenset(), ())  # fmt: skip
    index = PodIndex()
    index.observe(api_pod("near"))
    probe = LocalityProbe(sysfs_root=root, proc_root=tmp_path / "proc")
    seen = []
    for percent in (85, 79, 81, 77, 79, 81, 83):  # threshold 80%, 2 points either side
        stat.write_text(v2_numa_stat({0: percent, 1: 100 - percent}, {}, [0, 1]))
        (report,) = probe.measure(topology, [audit], index.refs()).pods
        seen.append(report.verdict)
    assert seen == ["local", "local", "local", "remote", "remote", "remote", "local"]
