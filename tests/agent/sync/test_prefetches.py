"""Dataset prefetches counted by the node's agent (issue 35): the prefetch CLI runs on a real
temporary cache tree and writes its termination message where the kubelet mounts one; the
agent reads it from a pod status shaped as the kubelet reports it and counts hits, bytes
downloaded, failures, and prefetches that could not make room under --max-cache-bytes."""

from __future__ import annotations

import argparse
import logging
import os
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import CollectorRegistry, generate_latest

from agent.cli import prefetch as cli
from agent.sync.pod_events.prefetches import PrefetchCounts, finished_prefetches
from common.cache_layout import version_dir
from tests.agent.cache.helpers import write_tree

POD_A = "5f0c1d2e-0000-4000-8000-00000000000a"  # the pod that holds dataset "old"
CONTAINER = "topoplace-prefetch-imagenet-1a2b3c4d"


class Node:
    """A node's cache and the kubelet's termination-message file for one init container."""

    def __init__(self, tmp: Path, monkeypatch: pytest.MonkeyPatch) -> None:
        self.cache, self.sources, self.tmp = tmp / "cache", tmp / "src", tmp
        self.log = tmp / "termination-log"
        monkeypatch.setattr(cli, "TERMINATION_LOG", self.log)

    def source(self, name: str, size: int) -> str:
        return write_tree(self.sources / name, {"data.bin": os.urandom(size)}).as_uri()

    def prefetch(self, name: str, source: str, *extra: str) -> tuple[int, str]:
        """Run the init container's command; its exit code and termination message."""
        self.log.write_text("")  # the kubelet mounts an empty file per container start
        parser = argparse.ArgumentParser()
        cli.add_arguments(parser)
        args = ["--dataset", name, "--version", "v1", "--source", source,
                "--cache-root", str(self.cache), *extra]  # fmt: skip
        return cli.run(parser.parse_args(args)), self.log.read_text()


@pytest.fixture
def node(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Node:
    return Node(tmp_path, monkeypatch)


def pod(uid: str, *inits: dict[str, Any]) -> dict[str, Any]:
    return {
        "metadata": {"uid": uid, "namespace": "ml", "name": "trainer-0"},
        "status": {"phase": "Pending", "initContainerStatuses": list(inits)},
    }


def terminated(code: int, message: str, name: str = CONTAINER, **more: Any) -> dict[str, Any]:
    state = {"exitCode": code, "reason": "Completed" if code == 0 else "Error",
             "message": message, "startedAt": "2026-12-04T10:00:00Z",
             "finishedAt": "2026-12-04T10:00:09Z"}  # fmt: skip
    return {"name": name, "ready": code == 0, "restartCount": 0, "image": "topoplace-agent",
            "state": {"terminated": state}, **more}  # fmt: skip


def sample(registry: CollectorRegistry, name: str, **labels: str) -> float:
    value = registry.get_sample_value(name, labels)
    assert value is not None, f"no sample {name}{labels}"
    return value


def test_a_full_cache_whose_other_version_is_leased_counts_one_blocked_eviction(
    node: Node,
) -> None:
    old = node.source("old", 60_000)
    assert node.prefetch("old", old, "--pod-uid", POD_A)[0] == 0  # leased by a running pod
    code, message = node.prefetch("imagenet", node.source("imagenet", 50_000),
                                  "--max-cache-bytes", "80000")  # fmt: skip
    assert code == 0  # downloaded anyway
    assert version_dir(node.cache, "old", "v1").is_dir()  # in use: kept
    registry = CollectorRegistry()
    counts = PrefetchCounts(registry)
    counts.observe(pod("u1", terminated(0, message)))
    assert sample(registry, "topoplace_agent_dataset_cache_evictions_blocked_total") == 1
    assert sample(registry, "topoplace_agent_dataset_prefetches_total", outcome="downloaded") == 1
    assert sample(registry, "topoplace_agent_dataset_prefetch_bytes_total") == 50_000


def test_a_full_cache_that_can_evict_counts_none(node: Node) -> None:
    assert node.prefetch("old", node.source("old", 60_000))[0] == 0  # no pod holds it
    code, message = node.prefetch("imagenet", node.source("imagenet", 50_000),
                                  "--max-cache-bytes", "80000")  # fmt: skip
    assert code == 0
    assert not version_dir(node.cache, "old", "v1").exists()  # evicted to make room
    registry = CollectorRegistry()
    PrefetchCounts(registry).observe(pod("u1", terminated(0, message)))
    assert sample(registry, "topoplace_agent_dataset_cache_evictions_blocked_total") == 0
    assert sample(registry, "topoplace_agent_dataset_prefetches_total", outcome="downloaded") == 1


def test_hits_bytes_and_failures_each_counted_once_however_often_the_pod_is_seen(
    node: Node,
) -> None:
    source = node.source("imagenet", 70_000)
    first = node.prefetch("imagenet", source)
    hit = node.prefetch("imagenet", source)  # a second pod on the same node
    failed = node.prefetch("missing", (node.tmp / "not-there").as_uri())
    assert (first[0], hit[0], failed[0]) == (0, 0, cli.EXIT_CODES["not_found"])
    registry = CollectorRegistry()
    counts = PrefetchCounts(registry)
    for _ in range(3):  # ADDED, MODIFIED, the next relist
        counts.observe(pod("u1", terminated(0, first[1])))
        counts.observe(pod("u2", terminated(0, hit[1])))
        counts.observe(pod("u3", terminated(failed[0], failed[1])))
    page = generate_latest(registry).decode()
    assert 'topoplace_agent_dataset_prefetches_total{outcome="downloaded"} 1.0' in page
    assert 'topoplace_agent_dataset_prefetches_total{outcome="hit"} 1.0' in page
    assert 'topoplace_agent_dataset_prefetches_total{outcome="failed"} 1.0' in page
    assert "topoplace_agent_dataset_prefetch_bytes_total 70000.0" in page  # the hit adds none
    assert "u1" not in page and CONTAINER not in page  # no pod or container in a label


def test_a_retried_prefetch_counts_its_failure_and_its_success(node: Node) -> None:
    ok = node.prefetch("imagenet", node.source("imagenet", 1_000))[1]
    before = terminated(5, "prefetch failed: s3://b/x: connection reset")["state"]
    retried = terminated(0, ok, restartCount=1, lastState=before)
    registry = CollectorRegistry()
    PrefetchCounts(registry).observe(pod("u1", retried))
    assert sample(registry, "topoplace_agent_dataset_prefetches_total", outcome="failed") == 1
    assert sample(registry, "topoplace_agent_dataset_prefetches_total", outcome="downloaded") == 1


def test_other_init_containers_and_running_prefetches_are_not_counted() -> None:
    running = {"name": CONTAINER, "restartCount": 0, "state": {"running": {}}}
    user_init = terminated(0, "", name="wait-for-db")
    assert finished_prefetches(pod("u1", running, user_init)) == []


def test_a_malformed_report_is_logged_naming_the_container_and_not_counted(
    caplog: pytest.LogCaptureFixture,
) -> None:
    bad = terminated(0, 'topoplace-prefetch: {"outcome": "maybe", "bytes": -1}')
    with pytest.raises(ValueError, match=f"{CONTAINER}.*outcome.*bytes"):
        finished_prefetches(pod("u1", bad))
    registry = CollectorRegistry()
    with caplog.at_level(logging.WARNING):
        PrefetchCounts(registry).observe(pod("u1", bad))
    assert "trainer-0" in caplog.text and "not counted" in caplog.text
    for outcome in ("hit", "downloaded", "failed"):
        assert sample(registry, "topoplace_agent_dataset_prefetches_total", outcome=outcome) == 0
