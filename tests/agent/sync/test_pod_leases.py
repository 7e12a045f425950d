"""The agent's pod watch keeps dataset leases (issue 17, part 1): every pod on the node that
mounts a cached version holds one, prefetch or not; a finished or deleted pod's go; leases of
pods gone while the agent was down are swept at its next start. Real kubernetes-asyncio
client (list + watch) against the fake API server."""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path, PurePosixPath

from agent.cache.lease import lease_and_check, leases
from agent.sync.labels.node_client import connect
from agent.sync.leases.pod_watch import PodLeases, mounted_versions
from common.cache_layout import TEMP_PREFIX, lease_dir
from tests.agent.sync.conftest import NODE
from tests.agent.sync.fake_apiserver import FakeApiServer
from tests.agent.sync.fake_pods import pod
from tests.agent.sync.harness import complete_version, wait_until

ROOT = PurePosixPath("/var/lib/topoplace/datasets")
UID_1, UID_2, UID_GONE = "uid-trainer-1", "uid-trainer-2", "uid-deleted-while-down"


def _cache_volume(root: PurePosixPath | Path) -> list[dict[str, object]]:
    return [{"name": "topoplace-datasets", "hostPath": {"path": str(root), "type": "Directory"}}]


def _subpath_mount(subpath: str) -> dict[str, object]:
    return {
        "name": "topoplace-datasets",
        "mountPath": "/data",
        "subPath": subpath,
        "readOnly": True,
    }


def test_versions_are_read_from_hostpath_mounts_as_the_webhook_writes_them() -> None:
    webhook_style = pod(
        "a", uid="u", node=NODE, volumes=_cache_volume(ROOT), mounts=[_subpath_mount("imagenet/v1")]
    )
    direct = pod(
        "b",
        uid="u",
        node=NODE,
        volumes=[{"name": "d", "hostPath": {"path": f"{ROOT}/coco/2017/train"}}],
        mounts=[{"name": "d", "mountPath": "/coco"}],
    )
    elsewhere = pod(
        "c",
        uid="u",
        node=NODE,
        volumes=[{"name": "d", "hostPath": {"path": "/var/lib/other/imagenet/v1"}}],
        mounts=[{"name": "d", "mountPath": "/x"}],
    )
    whole_root = pod(
        "d", uid="u", node=NODE, volumes=_cache_volume(ROOT), mounts=[_subpath_mount("")]
    )
    temp = pod(
        "e", uid="u", node=NODE, volumes=_cache_volume(ROOT),
        mounts=[_subpath_mount(f"imagenet/{TEMP_PREFIX}x")],
    )  # fmt: skip
    assert mounted_versions(webhook_style, ROOT) == {("imagenet", "v1")}
    assert mounted_versions(direct, ROOT) == {("coco", "2017")}
    assert mounted_versions(elsewhere, ROOT) == set()
    assert mounted_versions(whole_root, ROOT) == set()  # the prefetcher's own mount
    assert mounted_versions(temp, ROOT) == set()


@asynccontextmanager
async def _watching(server: FakeApiServer, root: Path) -> AsyncIterator[PodLeases]:
    stop = asyncio.Event()
    async with connect(kubeconfig=server.write_kubeconfig()) as nodes:
        keeper = PodLeases(nodes.api, node_name=NODE, cache_root=root, watch_seconds=30)
        task = asyncio.create_task(keeper.run(stop))
        try:
            yield keeper
        finally:
            stop.set()
            await asyncio.wait_for(task, timeout=5)


def _holders(root: Path) -> set[tuple[str, str, str]]:
    return {(lease.name, lease.version, lease.pod_uid) for lease in leases(root)}


async def test_a_pod_mounting_a_version_without_prefetch_holds_a_lease_until_it_finishes(
    apiserver: FakeApiServer, dataset_root: Path
) -> None:
    complete_version(dataset_root, "imagenet", "2024-06")
    volumes, mounts = _cache_volume(dataset_root), [_subpath_mount("imagenet/2024-06")]
    async with _watching(apiserver, dataset_root) as keeper:
        await wait_until(lambda: keeper.lists >= 1, what="first pod list")
        apiserver.pods.add(pod("t1", uid=UID_1, node=NODE, volumes=volumes, mounts=mounts))
        apiserver.pods.add(pod("t2", uid=UID_2, node=NODE, volumes=volumes, mounts=mounts))
        apiserver.pods.add(
            pod("x", uid="elsewhere", node="other-node", volumes=volumes, mounts=mounts)
        )
        want = {("imagenet", "2024-06", UID_1), ("imagenet", "2024-06", UID_2)}
        await wait_until(lambda: _holders(dataset_root) == want, what="leases of both pods")

        apiserver.pods.set_phase(UID_1, "Succeeded")
        await wait_until(
            lambda: _holders(dataset_root) == {("imagenet", "2024-06", UID_2)},
            what="the finished pod's lease dropped",
        )
        apiserver.pods.delete(UID_2)
        await wait_until(lambda: _holders(dataset_root) == set(), what="the deleted pod's lease")


async def test_leases_of_pods_gone_while_the_agent_was_down_are_swept_at_start(
    apiserver: FakeApiServer, dataset_root: Path
) -> None:
    complete_version(dataset_root, "imagenet", "2024-06")
    # Before the agent starts: a prefetch for a pod that is still there, one for a pod deleted
    # since, and the temporary a SIGKILLed prefetch left mid-write.
    apiserver.pods.add(pod("alive", uid=UID_1, node=NODE))
    for uid in (UID_1, UID_GONE):
        lease_and_check(dataset_root, "imagenet", "2024-06", uid, writer="prefetch")
    ldir = lease_dir(dataset_root, "imagenet", "2024-06")
    (ldir / f"{TEMP_PREFIX}half").write_text("{")
    for entry in ldir.iterdir():
        os.utime(entry, (1_000_000, 1_000_000))  # written long before the agent's list

    async with _watching(apiserver, dataset_root) as keeper:
        await wait_until(lambda: keeper.lists >= 1, what="first pod list")
        assert _holders(dataset_root) == {("imagenet", "2024-06", UID_1)}
        assert sorted(p.name for p in ldir.iterdir()) == [".lock", UID_1]

        # The watch expires (etcd compaction): the agent lists again and keeps what is live.
        apiserver.pods.expire_watches()
        await wait_until(lambda: keeper.lists >= 2, what="a relist after 410 Gone")
        assert _holders(dataset_root) == {("imagenet", "2024-06", UID_1)}


async def test_without_leases_the_watch_still_tells_the_publisher_of_every_pod_event(
    apiserver: FakeApiServer, dataset_root: Path
) -> None:
    """`--no-dataset-leases` with the NodeResourceTopology publisher on: one watch, no leases,
    an event for every start, change and stop (even with no writable lease directory)."""
    complete_version(dataset_root, "imagenet", "2024-06")
    volumes, mounts = _cache_volume(dataset_root), [_subpath_mount("imagenet/2024-06")]
    events: list[int] = []
    stop = asyncio.Event()
    async with connect(kubeconfig=apiserver.write_kubeconfig()) as nodes:
        keeper = PodLeases(
            nodes.api,
            node_name=NODE,
            cache_root=dataset_root / "absent",  # not writable: leases would wait for it
            watch_seconds=30,
            on_event=lambda: events.append(1),
            lease=False,
        )
        task = asyncio.create_task(keeper.run(stop))
        await wait_until(lambda: keeper.lists >= 1 and len(events) == 1, what="first pod list")
        apiserver.pods.add(pod("t1", uid=UID_1, node=NODE, volumes=volumes, mounts=mounts))
        await wait_until(lambda: len(events) == 2, what="the start heard")
        apiserver.pods.set_phase(UID_1, "Succeeded")
        await wait_until(lambda: len(events) == 3, what="the finish heard")
        apiserver.pods.delete(UID_1)
        await wait_until(lambda: len(events) == 4, what="the delete heard")
        stop.set()
        await asyncio.wait_for(task, timeout=5)
    assert _holders(dataset_root) == set()
