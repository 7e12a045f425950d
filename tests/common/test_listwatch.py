"""common/kube/listwatch.py through the real kubernetes-asyncio client against an in-process
API server speaking the list/watch protocol (tests/webhook/server/fake_nodes.py): events and
bookmarks, 410 Gone (relist, then resume), a dropped stream (resume, no relist), a 1 MiB
object in one event, 500s (backs off, recovers, no tight loop). Nothing here sleeps to
synchronise: every wait is on a condition the loop's handlers, calls and sleeps notify."""

from __future__ import annotations

import asyncio
import contextlib
import copy
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from kubernetes_asyncio import client

from common.backoff import Backoff, BackoffPolicy
from common.kube.listwatch import ListWatch, Snapshot
from common.kube_config import load_configuration
from tests.agent.sync.fake_apiserver import Fault
from tests.webhook.server.fake_nodes import NodeApiServer

# rand=1.0: every delay is its ceiling, 0.5, 1, 2, 4 … (the policy's defaults)
STEPS = [0.5, 1.0, 2.0, 4.0, 8.0]


def node(name: str, **annotations: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "annotations": annotations},
        "spec": {},
        "status": {},
    }


@dataclass
class Probe:
    """Everything the loop did, and a condition notified whenever it did something."""

    snapshots: list[Snapshot] = field(default_factory=list)
    events: list[tuple[str, str]] = field(default_factory=list)  # (kind, node name)
    objects: dict[str, dict[str, Any]] = field(default_factory=dict)
    delays: list[float] = field(default_factory=list)
    changed: asyncio.Condition = field(default_factory=asyncio.Condition)

    async def notify(self) -> None:
        async with self.changed:
            self.changed.notify_all()

    async def on_list(self, snapshot: Snapshot) -> None:
        self.snapshots.append(snapshot)
        self.objects = {o["metadata"]["name"]: o for o in snapshot.items}
        await self.notify()

    async def on_event(self, kind: str, obj: dict[str, Any]) -> None:
        name = obj["metadata"]["name"]
        self.events.append((kind, name))
        if kind == "DELETED":
            self.objects.pop(name, None)
        else:
            self.objects[name] = obj
        await self.notify()

    async def sleep(self, seconds: float) -> None:
        """Never waits: records the delay the loop chose and lets the test look."""
        self.delays.append(seconds)
        await self.notify()

    async def until(self, check: Callable[[], bool], what: str) -> None:
        try:
            async with asyncio.timeout(15), self.changed:
                await self.changed.wait_for(check)
        except TimeoutError:
            raise AssertionError(f"timed out waiting for {what}") from None


@dataclass
class Loop:
    api: NodeApiServer
    probe: Probe
    watch: ListWatch

    def watches_from(self) -> list[str]:
        return [q.get("resourceVersion", "") for q in self.api.node_store.watches]


@pytest.fixture
async def api(tmp_path: Path) -> AsyncIterator[NodeApiServer]:
    async with NodeApiServer(tmp_path) as server:
        server.node_store.put(node("a"))
        server.node_store.put(node("b"))
        yield server


@contextlib.asynccontextmanager
async def following(api: NodeApiServer, *, watch_seconds: int = 30) -> AsyncIterator[Loop]:
    probe = Probe()
    cfg = await load_configuration(api.write_kubeconfig())
    async with client.ApiClient(cfg) as connection:
        core = client.CoreV1Api(connection)

        async def list_node(**kwargs: Any) -> Any:
            response = await core.list_node(**kwargs)
            await probe.notify()  # a request answered: the test may look at the server
            return response

        watch = ListWatch(
            list_node,
            what="nodes",
            on_list=probe.on_list,
            on_event=probe.on_event,
            backoff=Backoff(BackoffPolicy(), rand=lambda: 1.0),
            sleep=probe.sleep,
            watch_seconds=watch_seconds,
        )
        task = asyncio.create_task(watch.run())
        try:
            yield Loop(api, probe, watch)
        finally:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)


@pytest.fixture
async def loop(api: NodeApiServer) -> AsyncIterator[Loop]:
    async with following(api) as running:
        yield running


def _watching(loop: Loop, count: int = 1) -> Callable[[], bool]:
    return lambda: len(loop.api.node_store.watches) >= count


async def test_lists_then_follows_events_and_resumes_from_a_bookmark(api: NodeApiServer) -> None:
    # The server ends each watch after a second (its timeoutSeconds): the next one resumes.
    async with following(api, watch_seconds=1) as loop:
        store, probe = api.node_store, loop.probe
        await probe.until(_watching(loop), "the watch")
        (snapshot,) = probe.snapshots
        assert sorted(o["metadata"]["name"] for o in snapshot.items) == ["a", "b"]
        query = store.watches[0]
        assert query["resourceVersion"] == snapshot.resource_version
        assert query["allowWatchBookmarks"] in ("true", "True")  # the client writes True
        assert query["timeoutSeconds"] == "1"
        store.put(node("c"))
        store.put(node("a", changed="yes"))
        store.remove("b")
        await probe.until(lambda: len(probe.events) == 3, "three events")
        assert probe.events == [("ADDED", "c"), ("MODIFIED", "a"), ("DELETED", "b")]
        assert sorted(probe.objects) == ["a", "c"]
        store.bookmark()  # a newer version, no object: no handler hears it
        marked = str(store.rv)
        await probe.until(lambda: marked in loop.watches_from(), "a watch from the bookmark")
        assert len(probe.events) == 3 and len(probe.snapshots) == 1 and store.lists == 1


async def test_a_410_relists_then_resumes_from_the_new_list(loop: Loop) -> None:
    store, probe = loop.api.node_store, loop.probe
    await probe.until(_watching(loop), "the watch")
    store.put(node("c"))
    await probe.until(lambda: "c" in probe.objects, "an event since the list")
    store.delete_quietly("uid-b")  # gone in the compacted history: only a list can tell
    store.expire_watches()  # the open watch gets an ERROR event with code 410
    store.put(node("d"))
    await probe.until(lambda: len(probe.snapshots) == 2, "the relist after the ERROR 410")
    assert sorted(probe.objects) == ["a", "c", "d"] and probe.delays == []  # at once
    await probe.until(_watching(loop, 2), "the watch after the relist")
    assert loop.watches_from()[1] == probe.snapshots[1].resource_version
    store.put(node("e"))
    await probe.until(lambda: "e" in probe.objects, "an event on the resumed watch")
    assert len(probe.snapshots) == 2
    # A watch answered 410 (not an event): a list too.
    loop.api.faults.append(Fault(410, method="WATCH"))
    store.drop_watches()
    await probe.until(lambda: len(probe.snapshots) == 3, "the relist after HTTP 410")


async def test_410_straight_after_each_list_backs_off_instead_of_spinning(loop: Loop) -> None:
    store, probe = loop.api.node_store, loop.probe
    await probe.until(_watching(loop), "the watch")
    store.expire_watches()  # and nothing changes: every list's version is expired too
    await probe.until(lambda: len(probe.delays) >= 4, "four paced relists")
    assert probe.delays[:4] == STEPS[:4]
    assert len(probe.snapshots) - 1 <= len(probe.delays) <= len(probe.snapshots)
    store.put(node("c"))  # the store moves past the compaction: the loop recovers
    await probe.until(lambda: "c" in probe.objects, "the node after recovery")


async def test_a_dropped_stream_resumes_from_the_last_version_without_a_list(loop: Loop) -> None:
    store, probe = loop.api.node_store, loop.probe
    await probe.until(_watching(loop), "the watch")
    store.put(node("c"))
    await probe.until(lambda: "c" in probe.objects, "the ADDED node")
    seen = loop.watch.resource_version
    store.drop_watches()  # the connection is cut mid-stream
    store.put(node("d"))  # while the watch is down
    await probe.until(lambda: "d" in probe.objects, "the node added while the watch was down")
    assert loop.watches_from()[1] == seen
    assert len(probe.snapshots) == 1 and store.lists == 1  # resumed, never listed again


async def test_a_one_mebibyte_object_arrives_in_one_event_and_one_beyond_the_line_limit(
    loop: Loop,
) -> None:
    store, probe = loop.api.node_store, loop.probe
    await probe.until(_watching(loop), "the watch")
    big = "x" * (1 << 20)
    # kubernetes-asyncio's session reads with read_bufsize 2 MiB: aiohttp's lines end at 4 MiB.
    huge = "y" * (8 << 20)
    store.put(node("big", blob=big))
    store.put(node("huge", blob=huge))
    store.put(node("after"))
    await probe.until(lambda: "after" in probe.objects, "the events after the big ones")
    assert probe.objects["big"]["metadata"]["annotations"]["blob"] == big
    assert probe.objects["huge"]["metadata"]["annotations"]["blob"] == huge
    assert probe.events == [("ADDED", "big"), ("ADDED", "huge"), ("ADDED", "after")]
    assert len(probe.snapshots) == 1 and probe.delays == []


async def test_api_500s_back_off_recover_and_reset_after_a_healthy_watch(
    api: NodeApiServer, loop: Loop
) -> None:
    probe = loop.probe
    await probe.until(_watching(loop), "the watch")
    api.fail_all(500)
    api.node_store.drop_watches()
    await probe.until(lambda: len(probe.delays) >= 5, "five failed attempts")
    assert probe.delays[:5] == STEPS  # doubling: the loop waited after every failure
    failed = api.node_requests[2:]  # list, watch, then the outage's attempts
    # One delay for the cut stream, then one after each refused watch: no tight loop.
    assert len(probe.delays) - 1 <= len(failed) <= len(probe.delays)
    assert all(kind == "watch" for kind in failed)  # resumed, never relisted for a 500
    api.recover()
    api.node_store.put(node("c"))
    await probe.until(lambda: "c" in probe.objects, "the event after recovery")
    before = len(probe.delays)
    api.faults.append(Fault(500, method="WATCH"))
    api.node_store.drop_watches()
    await probe.until(lambda: len(probe.delays) > before, "the next failure")
    assert probe.delays[before] == STEPS[0]  # the healthy watch reset the backoff
    api.node_store.put(node("d"))
    await probe.until(lambda: "d" in probe.objects, "the resumed watch")
    assert len(probe.snapshots) == 1


async def test_a_watch_the_server_ends_at_once_is_paced(api: NodeApiServer) -> None:
    probe = Probe()
    cfg = await load_configuration(api.write_kubeconfig())
    async with client.ApiClient(cfg) as connection:
        watch = ListWatch(
            client.CoreV1Api(connection).list_node,
            what="nodes",
            on_list=probe.on_list,
            on_event=probe.on_event,
            backoff=Backoff(BackoffPolicy(), rand=lambda: 1.0),
            sleep=probe.sleep,
            watch_seconds=0,  # the fake ends each watch before it sends anything
        )
        task = asyncio.create_task(watch.run())
        try:
            await probe.until(lambda: len(probe.delays) >= 4, "four paced watches")
        finally:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
    assert probe.delays[:4] == STEPS[:4]
    assert len(probe.delays) <= watch.watches <= len(probe.delays) + 1
    assert watch.lists == 1


async def test_a_handler_error_relists_after_a_backoff(api: NodeApiServer) -> None:
    probe = Probe()
    refuse = {"bad"}

    async def on_event(kind: str, obj: dict[str, Any]) -> None:
        if obj["metadata"]["name"] in refuse:
            refuse.clear()  # the relist's snapshot holds it; later events are fine
            raise LookupError("cannot read it")
        await probe.on_event(kind, obj)

    cfg = await load_configuration(api.write_kubeconfig())
    async with client.ApiClient(cfg) as connection:
        watch = ListWatch(
            client.CoreV1Api(connection).list_node,
            what="nodes",
            on_list=probe.on_list,
            on_event=on_event,
            backoff=Backoff(BackoffPolicy(), rand=lambda: 1.0),
            sleep=probe.sleep,
            handler_errors=(LookupError,),
        )
        task = asyncio.create_task(watch.run())
        try:
            await probe.until(lambda: len(probe.snapshots) == 1, "the list")
            api.node_store.put(copy.deepcopy(node("bad")))
            await probe.until(lambda: len(probe.snapshots) == 2, "the relist")
        finally:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
    assert probe.delays == [STEPS[0]] and "bad" in probe.objects
