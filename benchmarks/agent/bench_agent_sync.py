"""Agent label sync: API cost of steady state, and dataset-marker-to-label latency.

Targets: 0 API writes per hour per node on unchanged hardware (one GET per resync is the
whole cost), and ≤ 2 s from a `.topoplace-complete` marker appearing to the label patch.
Runs the real sync loop, kubernetes-asyncio client and cache watcher against the in-process
fake API server from tests/agent/sync. The hour is simulated: the loop's sleep is replaced
by a virtual clock, so every resync really happens (discovery, GET, diff) without waiting.
"""

from __future__ import annotations

import asyncio
import statistics
import tempfile
import time
from functools import partial
from pathlib import Path
from typing import Any

from agent.discovery.discover import DiscoveryOptions, discover
from agent.sync.health.server import AgentMetrics
from agent.sync.labels.loop import Reconciled, SyncEvent, SyncLoop
from agent.sync.labels.node_client import connect
from common.vocabulary import dataset_label
from tests.agent.sync.fake_apiserver import FakeApiServer
from tests.agent.sync.harness import complete_version, make_tiny_sysfs, running_agent, wait_until

__all__ = ["run_sync_bench"]

NODE = "bench-node"
HOUR = 3600.0


class _VirtualHour:
    """The loop's sleep: advances a virtual clock and stops the loop after one hour."""

    def __init__(self, stop: asyncio.Event) -> None:
        self.now = 0.0
        self._stop = stop

    async def __call__(self, seconds: float) -> None:
        self.now += seconds
        if self.now >= HOUR:
            self._stop.set()
        await asyncio.sleep(0)


async def _simulated_hour(
    server: FakeApiServer, options: DiscoveryOptions, resync: float
) -> dict[str, Any]:
    metrics = AgentMetrics()
    stop = asyncio.Event()
    sleep = _VirtualHour(stop)
    reconciles = 0

    def emit(event: SyncEvent) -> None:
        nonlocal reconciles
        metrics.record(event)
        reconciles += isinstance(event, Reconciled)

    gets, patches = server.count("GET"), server.count("PATCH")
    started = time.perf_counter()
    async with connect(kubeconfig=server.write_kubeconfig(), on_call=emit) as nodes:
        loop = SyncLoop(
            nodes,
            partial(discover, options),
            node_name=NODE,
            resync_interval=resync,
            emit=emit,
            sleep=sleep,
            clock=lambda: sleep.now,
        )
        await loop.run(stop)
    return {
        "reconciles": reconciles,
        "API GETs": server.count("GET") - gets,
        "API writes": server.count("PATCH") - patches,
        "wall s": time.perf_counter() - started,
    }


async def _marker_latency(
    server: FakeApiServer, options: DiscoveryOptions, runs: int
) -> list[float]:
    key = dataset_label("imagenet")
    seconds: list[float] = []
    async with running_agent(server, node=NODE, options=options) as agent:
        await wait_until(lambda: agent.synced_count() >= 1)
        for i in range(runs):
            version = f"v{i:02d}"
            started = time.perf_counter()
            complete_version(options.dataset_root, "imagenet", version, files=0)
            while server.labels(NODE).get(key) != version:
                if time.perf_counter() - started > 30:
                    raise RuntimeError(f"label for {version} never came")
                await asyncio.sleep(0.005)
            seconds.append(time.perf_counter() - started)
            await asyncio.sleep(0.2)  # let the watcher go quiet between runs
    return seconds


async def _bench(runs: int) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        (root / "datasets").mkdir()
        complete_version(root / "datasets", "coco", "2017")
        options = DiscoveryOptions(
            sysfs_root=make_tiny_sysfs(root / "sys"),
            dataset_root=root / "datasets",
            kubelet_config=None,
            use_nvml=False,
            per_device_labels=False,
        )
        async with FakeApiServer(root) as server:
            server.add_node(NODE, labels={"kubernetes.io/hostname": NODE})
            for resync, note in (
                (60.0, "fresh node: first sync"),
                (60.0, "restart, labelled"),
                (10.0, "restart, labelled"),
            ):
                hour = await _simulated_hour(server, options, resync)
                rows.append(
                    {
                        "scenario": f"1 simulated hour, resync {resync:g} s, {note}",
                        **hour,
                        "target": "0 writes" if "restart" in note else "1 write",
                    }
                )
            latencies = await _marker_latency(server, options, runs)
        rows.append(
            {
                "scenario": f"marker appears → label patched (median of {runs})",
                "median s": statistics.median(latencies),
                "min s": min(latencies),
                "max s": max(latencies),
                "target": "≤ 2 s",
            }
        )
    return rows


def run_sync_bench(*, runs: int = 7) -> list[dict[str, Any]]:
    return asyncio.run(_bench(runs))


if __name__ == "__main__":
    from benchmarks.table import markdown_table

    print(markdown_table(run_sync_bench()))
