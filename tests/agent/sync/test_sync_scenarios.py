"""The node agent's sync loop end to end: real kubernetes-asyncio client, fake API server,
real discovery on a tiny sysfs tree, real dataset-cache watcher."""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import shutil
from pathlib import Path

import pytest

from agent.discovery.discover import Discovery, DiscoveryOptions, discover
from agent.sync.labels.node_diff import owned_part
from common.cache_layout import version_dir
from common.vocabulary import TOPOLOGY_ANNOTATION, Label, dataset_label, is_owned_key
from tests.agent.sync.conftest import NODE
from tests.agent.sync.fake_apiserver import MERGE, FakeApiServer
from tests.agent.sync.harness import complete_version, running_agent, wait_until

FOREIGN = {
    "kubernetes.io/hostname": NODE,
    "nvidia.com/gpu.count": "8",
    # Look like ours, are not: the agent must never touch them.
    "topoplace.io.example/gpus": "3",
    "x-topoplace.io/gpus": "3",
    "dataset.topoplace.io.mirror/imagenet": "old",
}
FOREIGN_ANNOTATIONS = {
    "node.alpha.kubernetes.io/ttl": "0",
    "x-topoplace.io/topology": "{}",
}


async def test_first_sync_adds_exactly_the_owned_labels(
    apiserver: FakeApiServer, options: DiscoveryOptions, dataset_root: Path
) -> None:
    complete_version(dataset_root, "imagenet", "2024-06")
    apiserver.add_node(NODE, labels=FOREIGN, annotations=FOREIGN_ANNOTATIONS)
    expected = discover(options)

    async with running_agent(apiserver, node=NODE, options=options) as agent:
        await wait_until(lambda: agent.synced_count() >= 1)

    labels = apiserver.labels(NODE)
    assert owned_part(labels) == dict(expected.labels)
    assert {k: v for k, v in labels.items() if not is_owned_key(k)} == FOREIGN
    # Facts of the tiny tree and the cache, independent of the discovery code's output.
    assert labels[Label.CPU_SOCKETS] == "1"
    assert labels[dataset_label("imagenet")] == "2024-06"
    annotations = apiserver.annotations(NODE)
    assert annotations[TOPOLOGY_ANNOTATION] == expected.annotations[TOPOLOGY_ANNOTATION]
    assert {k: v for k, v in annotations.items() if k != TOPOLOGY_ANNOTATION} == (
        FOREIGN_ANNOTATIONS
    )
    patches = [r for r in apiserver.requests if r.method == "PATCH"]
    assert len(patches) == 1
    assert patches[0].content_type == MERGE
    sent = {**patches[0].body["metadata"]["labels"], **patches[0].body["metadata"]["annotations"]}
    assert all(is_owned_key(k) for k in sent)


async def test_a_second_start_on_the_same_hardware_sends_no_write(
    apiserver: FakeApiServer, options: DiscoveryOptions, dataset_root: Path
) -> None:
    complete_version(dataset_root, "imagenet", "2024-06")
    apiserver.add_node(NODE, labels=FOREIGN)
    async with running_agent(apiserver, node=NODE, options=options) as first:
        await wait_until(lambda: first.synced_count() >= 1)
    version_after_first = apiserver.nodes[NODE]["metadata"]["resourceVersion"]
    writes_after_first = apiserver.count("PATCH")

    async with running_agent(apiserver, node=NODE, options=options) as second:
        await wait_until(lambda: second.synced_count() >= 1)
        assert [e.result for e in second.reconciles()] == ["unchanged"]

    assert writes_after_first == 1
    assert apiserver.count("PATCH") == 1
    assert apiserver.nodes[NODE]["metadata"]["resourceVersion"] == version_after_first


async def test_stale_owned_keys_go_and_similar_foreign_keys_stay(
    apiserver: FakeApiServer, options: DiscoveryOptions
) -> None:
    stale = {Label.GPU_PRODUCT: "NVIDIA-A100", dataset_label("coco"): "2017"}
    apiserver.add_node(NODE, labels={**FOREIGN, **stale}, annotations=FOREIGN_ANNOTATIONS)

    async with running_agent(apiserver, node=NODE, options=options) as agent:
        await wait_until(lambda: agent.synced_count() >= 1)

    labels = apiserver.labels(NODE)
    assert not set(stale) & set(labels)
    for key, value in FOREIGN.items():
        assert labels[key] == value
    assert apiserver.annotations(NODE)["x-topoplace.io/topology"] == "{}"
    (event,) = agent.reconciles()
    removed = {c.key for c in event.changes if c.new is None}
    assert removed == set(stale)


async def test_an_owned_label_edited_by_hand_is_repaired_at_the_next_resync(
    apiserver: FakeApiServer, options: DiscoveryOptions, dataset_root: Path
) -> None:
    complete_version(dataset_root, "imagenet", "2024-06")
    apiserver.add_node(NODE, labels=FOREIGN)
    async with running_agent(
        apiserver, node=NODE, options=options, resync_interval=0.2, watch=False
    ) as agent:
        await wait_until(lambda: agent.synced_count() >= 1)
        good = apiserver.labels(NODE)
        apiserver.edit(NODE, labels={Label.CPU_SOCKETS: "4", dataset_label("imagenet"): None})
        await wait_until(lambda: apiserver.labels(NODE) == good)

    repair = next(e for e in agent.reconciles() if e.result == "patched" and e.trigger != "start")
    assert repair.trigger == "resync"
    assert {(c.key, c.old, c.new) for c in repair.changes} == {
        (Label.CPU_SOCKETS, "4", "1"),
        (dataset_label("imagenet"), None, "2024-06"),
    }


async def test_dataset_marker_appearing_and_version_removed_follow_cache_events(
    apiserver: FakeApiServer, options: DiscoveryOptions, dataset_root: Path
) -> None:
    apiserver.add_node(NODE, labels=FOREIGN)
    key = dataset_label("imagenet")
    # Resync is an hour away: only the file-system events can explain the label changes.
    async with running_agent(apiserver, node=NODE, options=options) as agent:
        await wait_until(lambda: agent.synced_count() >= 1)
        assert key not in apiserver.labels(NODE)

        complete_version(dataset_root, "imagenet", "2024-06")
        await wait_until(lambda: apiserver.labels(NODE).get(key) == "2024-06")

        shutil.rmtree(version_dir(dataset_root, "imagenet", "2024-06"))
        await wait_until(lambda: key not in apiserver.labels(NODE))

    patched = [e for e in agent.reconciles() if e.result == "patched"]
    assert [e.trigger for e in patched] == ["start", "cache", "cache"]
    assert [(c.key, c.old, c.new) for c in patched[1].changes] == [(key, None, "2024-06")]
    assert [(c.key, c.old, c.new) for c in patched[2].changes] == [(key, "2024-06", None)]
    assert FOREIGN.items() <= apiserver.labels(NODE).items()


async def test_a_prefetch_writing_a_thousand_files_causes_one_reconcile(
    apiserver: FakeApiServer, options: DiscoveryOptions, dataset_root: Path
) -> None:
    apiserver.add_node(NODE)
    async with running_agent(apiserver, node=NODE, options=options) as agent:
        await wait_until(lambda: agent.synced_count() >= 1)
        # The prefetcher's order: download into a temporary sibling, rename, write the marker.
        temp = dataset_root / "imagenet" / ".topoplace-tmp-abc"
        temp.mkdir(parents=True)
        # In a thread, so the watcher sees the events while the "download" is still going.
        await asyncio.to_thread(_write_shards, temp, 1000)
        temp.rename(dataset_root / "imagenet" / "2024-06")
        complete_version(dataset_root, "imagenet", "2024-06", files=0)
        await wait_until(lambda: dataset_label("imagenet") in apiserver.labels(NODE))
        gets_then = apiserver.count("GET")
        # Give straggling events time to arrive; none may cause another pass.
        await asyncio.sleep(0.8)

    cache_passes = [e for e in agent.reconciles() if e.trigger == "cache"]
    assert len(cache_passes) == 1
    assert apiserver.count("GET") == gets_then
    assert apiserver.count("PATCH") == 2  # the first sync and the dataset label


def _write_shards(directory: Path, count: int) -> None:
    for i in range(count):
        (directory / f"shard-{i:05d}.tar").write_bytes(b"x" * 16)


async def test_a_cache_root_created_after_start_is_picked_up(
    apiserver: FakeApiServer, options: DiscoveryOptions, dataset_root: Path
) -> None:
    # A fresh node: no prefetch has created the cache root yet.
    later = dataset_root / "not-yet"
    options = dataclasses.replace(options, dataset_root=later)
    apiserver.add_node(NODE)
    async with running_agent(apiserver, node=NODE, options=options, watch_poll=0.1) as agent:
        await wait_until(lambda: agent.synced_count() >= 1)
        complete_version(later, "coco", "2017")
        await wait_until(lambda: apiserver.labels(NODE).get(dataset_label("coco")) == "2017")

    assert agent.reconciles()[-1].trigger == "cache"


async def test_changed_hardware_is_patched_and_logged_as_a_person_would_say_it(
    apiserver: FakeApiServer, options: DiscoveryOptions, caplog: pytest.LogCaptureFixture
) -> None:
    apiserver.add_node(NODE, labels=FOREIGN)
    real = discover(options)
    before = dataclasses.replace(real, labels={**real.labels, Label.GPU_NIC_PAIRS: "8"})
    after = dataclasses.replace(real, labels={**real.labels, Label.GPU_NIC_PAIRS: "7"})
    seen = [before]

    def chosen() -> Discovery:
        return seen[-1]

    caplog.set_level(logging.INFO, logger="agent.sync.labels.loop")
    async with running_agent(
        apiserver, node=NODE, options=options, discover_fn=chosen, resync_interval=0.05
    ) as agent:
        await wait_until(lambda: agent.synced_count() >= 1)
        seen.append(after)  # e.g. a NIC went missing after a reboot
        await wait_until(lambda: apiserver.labels(NODE)[Label.GPU_NIC_PAIRS] == "7")

    assert "gpu-nic-pairs 8 → 7" in caplog.text
    assert apiserver.count("PATCH") == 2


async def test_a_wiped_cache_root_removes_dataset_labels_and_is_watched_again(
    apiserver: FakeApiServer, options: DiscoveryOptions, dataset_root: Path
) -> None:
    complete_version(dataset_root, "coco", "2017")
    apiserver.add_node(NODE)
    key = dataset_label("coco")
    async with running_agent(apiserver, node=NODE, options=options, watch_poll=0.1) as agent:
        await wait_until(lambda: apiserver.labels(NODE).get(key) == "2017")
        shutil.rmtree(dataset_root)
        await wait_until(lambda: key not in apiserver.labels(NODE))
        complete_version(dataset_root, "coco", "2017")
        await wait_until(lambda: apiserver.labels(NODE).get(key) == "2017")

    assert [e.trigger for e in agent.reconciles() if e.result == "patched"] == [
        "start",
        "cache",
        "cache",
    ]
