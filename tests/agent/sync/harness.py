"""Test and benchmark helpers: a tiny sysfs tree, dataset markers, a scripted sleep and an
agent (client + sync loop + cache watcher) running in the test's event loop."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path

from agent.discovery.discover import Discovery, DiscoveryOptions, discover
from agent.sync.health.server import AgentMetrics
from agent.sync.labels.cache_watch import watch_cache
from agent.sync.labels.loop import Reconciled, SyncEvent, SyncLoop, log_event
from agent.sync.labels.node_client import connect
from common.backoff import Backoff
from common.cache_layout import marker_path, version_dir
from tests.agent.sync.fake_apiserver import FakeApiServer

__all__ = [
    "AgentUnderTest",
    "ScriptedSleep",
    "complete_version",
    "make_tiny_sysfs",
    "running_agent",
    "wait_until",
]


def make_tiny_sysfs(root: Path) -> Path:
    """A one-socket, two-CPU machine without PCI devices, as the kernel lays out those files."""
    cpu = root / "devices/system/cpu"
    cpu.mkdir(parents=True)
    (cpu / "online").write_text("0-1\n")
    (cpu / "possible").write_text("0-1\n")
    for n in (0, 1):
        topo = cpu / f"cpu{n}/topology"
        topo.mkdir(parents=True)
        (topo / "physical_package_id").write_text("0\n")
        (topo / "core_id").write_text(f"{n}\n")
        (topo / "thread_siblings_list").write_text(f"{n}\n")
    node0 = root / "devices/system/node/node0"
    node0.mkdir(parents=True)
    (node0 / "cpulist").write_text("0-1\n")
    (root / "bus/pci/devices").mkdir(parents=True)
    return root


def complete_version(root: Path, name: str, version: str, *, files: int = 1) -> Path:
    """Lay out a downloaded dataset version and then its marker, as the prefetcher does."""
    vdir = version_dir(root, name, version)
    vdir.mkdir(parents=True, exist_ok=True)
    for i in range(files):
        (vdir / f"part-{i:05d}.bin").write_bytes(b"x")
    marker = {
        "source": f"file:///src/{name}/",
        "files": files,
        "bytes": files,
        "completed_at": time.strftime("%Y-%m-%dT%H:%M:%S+00:00", time.gmtime()),
    }
    marker_path(root, name, version).write_text(json.dumps(marker))
    return vdir


async def wait_until(
    condition: Callable[[], bool], *, within: float = 10.0, what: str = "condition"
) -> float:
    """Poll `condition` every 20 ms; fail the test, naming `what`, if it does not hold within
    `within` seconds. Returns the moment (time.monotonic()) it was seen to hold."""
    deadline = time.monotonic() + within
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"{what} not met within {within}s")
        await asyncio.sleep(0.02)
    return time.monotonic()


@dataclass
class ScriptedSleep:
    """Test-mode sleep. Backoff delays (< `real_from`) are recorded and return at once; longer
    ones (the resync wait) really wait, so a converged loop idles instead of spinning.
    `on_sleep(n)` runs before the n-th (1-based) recorded delay returns."""

    real_from: float
    on_sleep: Callable[[int], Awaitable[None]] | None = None
    delays: list[float] = field(default_factory=list)

    async def __call__(self, seconds: float) -> None:
        if seconds >= self.real_from:
            await asyncio.sleep(seconds)
            return
        self.delays.append(seconds)
        if self.on_sleep is not None:
            await self.on_sleep(len(self.delays))
        await asyncio.sleep(0)


@dataclass
class AgentUnderTest:
    loop: SyncLoop
    metrics: AgentMetrics
    events: list[SyncEvent] = field(default_factory=list)

    def reconciles(self) -> list[Reconciled]:
        return [e for e in self.events if isinstance(e, Reconciled)]

    def synced_count(self) -> int:
        return sum(1 for e in self.reconciles() if e.synced)


@asynccontextmanager
async def running_agent(
    server: FakeApiServer,
    *,
    node: str,
    options: DiscoveryOptions,
    discover_fn: Callable[[], Discovery] | None = None,
    resync_interval: float = 3600.0,
    sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    backoff: Backoff | None = None,
    watch: bool = True,
    watch_poll: float = 2.0,
) -> AsyncIterator[AgentUnderTest]:
    """Run the real client, loop and watcher against `server` until the block exits."""
    metrics = AgentMetrics()
    stop = asyncio.Event()
    agent: AgentUnderTest | None = None

    def emit(event: SyncEvent) -> None:
        log_event(event)
        metrics.record(event)
        if agent is not None:
            agent.events.append(event)

    async with connect(kubeconfig=server.write_kubeconfig(), on_call=emit) as nodes:
        loop = SyncLoop(
            nodes,
            discover_fn or partial(discover, options),
            node_name=node,
            resync_interval=resync_interval,
            emit=emit,
            sleep=sleep,
            backoff=backoff,
        )
        agent = AgentUnderTest(loop=loop, metrics=metrics)
        tasks = [asyncio.create_task(loop.run(stop))]
        if watch:
            tasks.append(
                asyncio.create_task(
                    watch_cache(
                        options.dataset_root, loop.poke, stop=stop, poll_interval=watch_poll
                    )
                )
            )
        try:
            yield agent
        finally:
            stop.set()
            done, pending = await asyncio.wait(tasks, timeout=5)
            for task in pending:
                task.cancel()
            for task in done:
                task.result()  # a crash of the loop or watcher fails the test here
