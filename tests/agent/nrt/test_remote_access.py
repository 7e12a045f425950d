"""The zones' remote-access attribute: read from the real numastat files through read_body,
absent until a full busy window, at most one change a minute, none on an idle node."""

from __future__ import annotations

from pathlib import Path

from agent.audit.node_rates import RemoteRates
from agent.nrt.body import NodeRef
from agent.nrt.snapshot import NodeSources, read_body
from common.node_resource_topology import REMOTE_ACCESS_ATTRIBUTE
from tests.agent.audit.cgroupfs import numastat_text
from tests.agent.audit.kubelet_stub import FakeKubelet
from tests.agent.discovery.machines import build
from tests.agent.nrt.test_zones import offer_dgx

NODE = NodeRef("dgx-a", "uid-1")


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def write_counters(root: Path, node: int, local: int, other: int) -> None:
    (root / f"devices/system/node/node{node}/numastat").write_text(numastat_text(local, other))


def attributes(body: dict[str, object]) -> list[object]:
    return [z.get("attributes") for z in body["zones"]]  # type: ignore[attr-defined, union-attr]


def test_an_idle_hour_changes_nothing_and_a_busy_window_publishes_once(
    kubelet: FakeKubelet, tmp_path: Path
) -> None:
    offer_dgx(kubelet)
    kubelet.serve()
    root = build("dgx-h100", tmp_path / "sys")
    clock = Clock()
    rates = RemoteRates(clock=clock)
    sources = NodeSources(sysfs_root=root, pod_resources_socket=kubelet.socket, rates=rates)
    local, other = 7_724_312, 1_000
    write_counters(root, 0, local, other)
    write_counters(root, 1, local, other)
    first = read_body(sources, NODE)
    assert attributes(first) == [None, None]  # no full window yet: no figure, no attribute
    bodies = []
    for minute in range(1, 61):  # an idle hour: a few hundred pages a minute
        clock.now = minute * 60.0
        write_counters(root, 0, local + minute * 300, other + minute * 10)
        write_counters(root, 1, local + minute * 200, other)
        bodies.append(read_body(sources, NODE))
    assert all(b == first for b in bodies)  # what the publisher would write: nothing
    # A job starts on node 1's GPUs with its memory on node 0: 1 GiB a minute, 40% remote.
    base0, base1 = local + 60 * 300, local + 60 * 200
    changes = 0
    last = bodies[-1]
    for step in range(1, 25):  # every 10 s for four minutes (pod events poke the publisher)
        clock.now = 3600.0 + step * 10
        pages = step * 262_144 // 6
        write_counters(root, 0, base0 + pages * 6 // 10, other + 600 + pages * 4 // 10)
        write_counters(root, 1, base1 + step * 10, other)
        body = read_body(sources, NODE)
        changes += body != last
        last = body
    zone0 = last["zones"][0]
    assert zone0["attributes"] == [{"name": REMOTE_ACCESS_ATTRIBUTE, "value": "40"}]
    assert "attributes" not in last["zones"][1]  # idle all along: still no figure
    assert changes == 1  # the share held steady: one change, not one per window


async def test_the_publisher_writes_nothing_in_an_idle_hour_then_once_for_a_busy_minute(
    kubelet: FakeKubelet, tmp_path: Path
) -> None:
    """The real publisher over read_body: counts the writes an hour of rechecks makes."""
    import asyncio
    from functools import partial

    from agent.nrt.publisher import Publisher
    from tests.agent.nrt.fakes import ManualTime, MemoryStore, until

    offer_dgx(kubelet)
    kubelet.serve()
    root = build("dgx-h100", tmp_path / "sys")
    time, store = ManualTime(), MemoryStore()
    store.clock = time.clock
    rates = RemoteRates(clock=time.clock)
    sources = NodeSources(sysfs_root=root, pod_resources_socket=kubelet.socket, rates=rates)
    local = 7_724_312
    write_counters(root, 0, local, 0)
    write_counters(root, 1, local, 0)
    publisher = Publisher(store, partial(read_body, sources), node_name="dgx-a",
                          clock=time.clock, sleep=time.sleep, recheck=60.0)  # fmt: skip
    stop = asyncio.Event()
    task = asyncio.create_task(publisher.run(stop))

    async def idle() -> None:
        await until(lambda: time.waiting and not publisher.poked)

    await idle()
    assert len(store.writes) == 1  # the create
    for minute in range(1, 61):  # idle: a few hundred pages a minute on each node
        write_counters(root, 0, local + minute * 300, minute * 5)
        write_counters(root, 1, local + minute * 200, 0)
        time.advance(60)
        await idle()
    assert len(store.writes) == 1  # an idle hour: no write
    write_counters(root, 0, local + 60 * 300 + 100_000, 60 * 5 + 100_000)  # a busy minute
    time.advance(60)
    await idle()
    assert len(store.writes) == 2
    assert store.obj is not None
    assert store.obj["zones"][0]["attributes"] == [{"name": REMOTE_ACCESS_ATTRIBUTE, "value": "50"}]
    stop.set()
    await asyncio.wait_for(task, 5)
