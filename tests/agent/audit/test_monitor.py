"""The audit inside `run`: series per GPU container that follow the pods, counts by verdict,
and a kubelet socket that vanishes and comes back."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry

from agent.audit.facts import AuditOptions
from agent.audit.monitor import AuditMetrics, AuditMonitor
from agent.discovery.discover import DiscoveryOptions
from tests.agent.audit.kubelet_stub import FakeKubelet, container, devices, pod
from tests.agent.sync.harness import wait_until

Machine = Callable[[str], Path]
SERIES = "topoplace_agent_gpu_container_alignment"

ALIGNED = pod("ml", "good", container(
    "w", devices("nvidia.com/gpu", ["0000:1b:00.0"], [0]), cpus=range(4, 8)
))  # fmt: skip
REMOTE = pod("ml", "bad", container(
    "w", devices("nvidia.com/gpu", ["0000:1b:00.0"], [0]), cpus=range(60, 64)
))  # fmt: skip


def value(registry: CollectorRegistry, name: str, **labels: str) -> float | None:
    return registry.get_sample_value(name, labels)


def alignment(registry: CollectorRegistry) -> dict[tuple[str, str], float]:
    return {
        (s.labels["pod"], s.labels["verdict"]): s.value
        for metric in registry.collect()
        if metric.name == SERIES
        for s in metric.samples
    }


@pytest.fixture
def monitor_for(
    built_machine: Machine,
) -> Callable[[FakeKubelet], tuple[AuditMonitor, CollectorRegistry]]:
    def make(kubelet: FakeKubelet) -> tuple[AuditMonitor, CollectorRegistry]:
        registry = CollectorRegistry()
        discovery = DiscoveryOptions(sysfs_root=built_machine("dgx-h100"), use_nvml=False)
        options = AuditOptions(discovery=discovery, socket=kubelet.socket)
        return AuditMonitor(options, AuditMetrics(registry), interval=60), registry

    return make


async def test_series_follow_the_pods_and_count_by_verdict(
    kubelet: FakeKubelet,
    monitor_for: Callable[..., tuple[AuditMonitor, CollectorRegistry]],
    caplog: pytest.LogCaptureFixture,
) -> None:
    monitor, registry = monitor_for(kubelet)
    kubelet.serve(ALIGNED, REMOTE)
    with caplog.at_level(logging.WARNING):
        await monitor.refresh()
        await monitor.refresh()
    said = [r.getMessage() for r in caplog.records if "GPU container" in r.getMessage()]
    assert len(said) == 1 and said[0].startswith("GPU container ml/bad/w: cpus-remote: ")
    assert alignment(registry) == {("good", "aligned"): 1, ("bad", "cpus-remote"): 1}
    assert value(registry, "topoplace_agent_gpu_containers", verdict="aligned") == 1
    assert value(registry, "topoplace_agent_gpu_containers", verdict="cpus-remote") == 1
    assert value(registry, "topoplace_agent_gpu_containers", verdict="nic-far") == 0
    assert value(registry, "topoplace_agent_pod_resources_up") == 1

    kubelet.serve(ALIGNED)  # the bad pod ended: its series goes with it
    await monitor.refresh()
    assert alignment(registry) == {("good", "aligned"): 1}
    assert value(registry, "topoplace_agent_gpu_containers", verdict="cpus-remote") == 0


async def test_a_vanishing_socket_is_said_once_and_drops_the_series(
    kubelet: FakeKubelet,
    monitor_for: Callable[..., tuple[AuditMonitor, CollectorRegistry]],
    caplog: pytest.LogCaptureFixture,
) -> None:
    monitor, registry = monitor_for(kubelet)
    kubelet.serve(ALIGNED)
    stop = asyncio.Event()
    running = asyncio.create_task(monitor.run(stop))
    try:
        await wait_until(lambda: bool(alignment(registry)), what="the first audit")
        with caplog.at_level(logging.WARNING):
            kubelet.stop()  # the kubelet goes away mid-run and its socket with it
            await monitor.refresh()
            await monitor.refresh()
        assert alignment(registry) == {}
        assert value(registry, "topoplace_agent_pod_resources_up") == 0
        said = [r for r in caplog.records if "no placement audit" in r.getMessage()]
        assert len(said) == 1 and "no PodResources socket" in said[0].getMessage()

        # A kubelet coming back recreates the socket: audited at once, not after the interval.
        kubelet.serve(REMOTE)
        kubelet.start()
        await wait_until(
            lambda: alignment(registry) == {("bad", "cpus-remote"): 1},
            within=10,
            what="the audit after the socket came back",
        )
        assert value(registry, "topoplace_agent_pod_resources_up") == 1
    finally:
        stop.set()
        await asyncio.wait_for(running, 5)


async def test_a_malformed_answer_drops_the_series(
    kubelet: FakeKubelet, monitor_for: Callable[..., tuple[AuditMonitor, CollectorRegistry]]
) -> None:
    monitor, registry = monitor_for(kubelet)
    kubelet.serve(ALIGNED)
    await monitor.refresh()
    kubelet.serve_raw(b"\x0a\xff\xff\xff\xff\x0f")
    assert await monitor.refresh() is None
    assert alignment(registry) == {}
    assert value(registry, "topoplace_agent_pod_resources_up") == 0
