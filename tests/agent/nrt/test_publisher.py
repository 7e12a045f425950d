"""When the publisher writes: on pod events, coalesced to one write a second, never when the
body is unchanged, never on a timer; bad input (no CRD, no PodResources) logged once."""

from __future__ import annotations

import asyncio
import itertools
import logging
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import pytest

from agent.nrt.body import NodeRef
from agent.nrt.publisher import Publisher
from agent.sources.podresources import PodResourcesError
from tests.agent.nrt.fakes import ManualTime, MemoryStore, until


@dataclass
class Node:
    """What the kubelet would say: free GPUs per zone; `broken` makes the read fail."""

    free: tuple[int, int] = (4, 4)
    broken: str | None = None
    reads: int = 0

    def read(self, node: NodeRef) -> dict[str, Any]:
        self.reads += 1
        if self.broken:
            raise PodResourcesError(f"PodResources: {self.broken}", kind="unreachable")
        zones = [
            {"name": f"node-{i}", "type": "Node", "resources": [
                {"name": "nvidia.com/gpu", "capacity": "4", "allocatable": "4",
                 "available": str(n)}]}
            for i, n in enumerate(self.free)
        ]  # fmt: skip
        return {
            "apiVersion": "topology.node.k8s.io/v1alpha2",
            "kind": "NodeResourceTopology",
            "metadata": {"name": node.name, "ownerReferences": [
                {"apiVersion": "v1", "kind": "Node", "name": node.name, "uid": node.uid}]},
            "topologyPolicies": ["SingleNUMANodeContainerLevel"],
            "attributes": [],
            "zones": zones,
        }  # fmt: skip


@dataclass
class Rig:
    time: ManualTime
    store: MemoryStore
    node: Node
    publisher: Publisher

    async def idle(self) -> None:
        """Until the publisher waits for time or a poke again."""
        await until(lambda: self.time.waiting and not self.publisher.poked)

    def available(self) -> list[str]:
        assert self.store.obj is not None
        return [z["resources"][0]["available"] for z in self.store.obj["zones"]]


@pytest.fixture
async def rig() -> AsyncIterator[Rig]:
    time, store, node = ManualTime(), MemoryStore(), Node()
    store.clock = time.clock
    publisher = Publisher(
        store, node.read, node_name="dgx-a", clock=time.clock, sleep=time.sleep, recheck=60.0
    )
    stop = asyncio.Event()
    task = asyncio.create_task(publisher.run(stop))
    r = Rig(time, store, node, publisher)
    await r.idle()
    yield r
    stop.set()
    await asyncio.wait_for(task, 5)


async def test_first_pass_creates_the_object_then_nothing_while_nothing_changes(
    rig: Rig,
) -> None:
    assert len(rig.store.writes) == 1 and rig.available() == ["4", "4"]
    for _ in range(10):  # ten minutes of rechecks: reads, no writes
        rig.time.advance(60)
        await rig.idle()
    assert len(rig.store.writes) == 1
    assert rig.node.reads == 11


async def test_a_pod_event_writes_the_change_and_a_repeat_does_not(rig: Rig) -> None:
    rig.node.free = (3, 4)
    rig.publisher.poke()
    await rig.idle()
    rig.time.advance(1.0)  # the first write was at t=0: the change waits a second
    await rig.idle()
    assert rig.available() == ["3", "4"] and len(rig.store.writes) == 2
    for _ in range(3):  # follow-up reads and more events with nothing new: no write
        rig.publisher.poke()
        rig.time.advance(10)
        await rig.idle()
    assert len(rig.store.writes) == 2


async def test_a_burst_of_events_is_at_most_one_write_a_second_and_ends_exact(rig: Rig) -> None:
    """50 pod starts and stops in 10 s, each changing the free counts."""
    for i in range(50):
        rig.node.free = (i % 5, 4 - i % 3)
        rig.publisher.poke()
        await rig.idle()
        rig.time.advance(0.2)
        await rig.idle()
    for _ in range(10):  # the follow-ups run out
        rig.time.advance(1.0)
        await rig.idle()
    times = [t for t, _ in rig.store.writes]
    # (1e-9: the steps of 0.2 s add up with float rounding)
    assert all(b - a >= 1.0 - 1e-9 for a, b in itertools.pairwise(times))
    assert len(times) <= 12  # 10 s of burst, the first create and the last state
    assert rig.available() == [str(49 % 5), str(4 - 49 % 3)]


async def test_a_hand_edit_is_repaired_at_the_next_recheck(rig: Rig) -> None:
    assert rig.store.obj is not None
    rig.store.obj = {**rig.store.obj, "zones": []}
    rig.time.advance(60)
    await rig.idle()
    assert rig.available() == ["4", "4"] and len(rig.store.writes) == 2


async def test_no_crd_logs_once_ignores_pokes_and_publishes_once_it_appears(
    caplog: pytest.LogCaptureFixture,
) -> None:
    time, store, node = ManualTime(), MemoryStore(), Node()
    store.crd = False
    publisher = Publisher(store, node.read, node_name="n", clock=time.clock, sleep=time.sleep)
    stop = asyncio.Event()
    with caplog.at_level(logging.WARNING, logger="agent.nrt.publisher"):
        task = asyncio.create_task(publisher.run(stop))
        await until(lambda: time.waiting)
        for _ in range(20):  # pod events while the CRD is absent: no API calls for them
            publisher.poke()
        for _ in range(5):  # backoff 30 s doubling: 30, 60, 120, 240, 480 (full jitter)
            time.advance(600)
            await until(lambda: time.waiting and not publisher.poked)
    warnings = [r for r in caplog.records if "CRD" in r.getMessage()]
    assert len(warnings) == 1
    assert "noderesourcetopologies" in warnings[0].getMessage()
    assert store.gets == 6 and not store.writes
    store.crd = True
    time.advance(600)
    await until(lambda: len(store.writes) == 1)
    stop.set()
    await asyncio.wait_for(task, 5)


async def test_podresources_unreadable_logs_once_and_recovers(
    rig: Rig, caplog: pytest.LogCaptureFixture
) -> None:
    rig.node.broken = "connection refused"
    with caplog.at_level(logging.WARNING, logger="agent.nrt.publisher"):
        for _ in range(5):
            rig.publisher.poke()
            rig.time.advance(10)
            await rig.idle()
    assert sum("connection refused" in r.getMessage() for r in caplog.records) == 1
    rig.node.broken = None
    rig.node.free = (0, 4)
    rig.publisher.poke()
    await rig.idle()
    assert rig.available() == ["0", "4"]
