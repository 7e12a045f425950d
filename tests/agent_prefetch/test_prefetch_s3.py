"""`topoplace-agent prefetch` against a real S3 server (moto, loopback)."""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from agent.cache_layout import lock_path, marker_path, version_dir
from agent.cache_lock import DatasetLock
from agent.prefetch import PrefetchRequest, prefetch
from agent.transfer import SourceNotFound
from tests.agent_prefetch.conftest import FAKE_AWS, RunPrefetch, S3Server
from tests.agent_prefetch.helpers import digests, leftovers, sample_tree, tree_digests


@pytest.fixture
def dataset(s3: S3Server) -> tuple[str, dict[str, bytes]]:
    bucket = s3.new_bucket()
    files = sample_tree()
    s3.put_tree(bucket, "imagenet/2024-06/", files)
    s3.put_tree(bucket, "imagenet/2024-06-extra/", {"not-this.txt": b"sibling prefix"})
    return bucket, files


def test_nested_dataset_arrives_byte_identical_with_marker(
    run_prefetch: RunPrefetch, s3: S3Server, dataset: tuple[str, dict[str, bytes]], tmp_path: Path
) -> None:
    bucket, files = dataset
    source = f"s3://{bucket}/imagenet/2024-06/"
    done = run_prefetch(
        "--dataset", "imagenet", "--version", "2024-06", "--source", source,
        "--cache-root", str(tmp_path), "--parallel", "3",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert tree_digests(version_dir(tmp_path, "imagenet", "2024-06")) == digests(files)
    marker = json.loads(marker_path(tmp_path, "imagenet", "2024-06").read_text())
    assert marker["source"] == source
    assert marker["files"] == len(files)
    assert marker["bytes"] == sum(len(b) for b in files.values())
    assert marker["completed_at"].endswith("Z")
    assert leftovers(tmp_path / "imagenet") == []
    assert "prefetched imagenet@2024-06: 6 files" in done.stderr


def test_second_run_is_a_cache_hit_without_reading_the_store(
    run_prefetch: RunPrefetch, s3: S3Server, dataset: tuple[str, dict[str, bytes]], tmp_path: Path
) -> None:
    bucket, files = dataset
    args = ("--dataset", "imagenet", "--version", "2024-06", "--cache-root", str(tmp_path))
    source = f"s3://{bucket}/imagenet/2024-06/"
    assert run_prefetch(*args, "--source", source).returncode == 0
    assert s3.gets(bucket, "imagenet/")  # the first run did read objects
    for rel in files:  # the store loses the data: only the cache can answer now
        s3.client.delete_object(Bucket=bucket, Key=f"imagenet/2024-06/{rel}")
    before = len(s3.requests)

    again = run_prefetch(*args, "--source", source)

    assert again.returncode == 0, again.stderr
    assert "cache hit" in again.stderr
    assert s3.requests[before:] == []
    assert tree_digests(version_dir(tmp_path, "imagenet", "2024-06")) == digests(files)


def test_single_object_source_lands_under_its_name(
    run_prefetch: RunPrefetch, s3: S3Server, dataset: tuple[str, dict[str, bytes]], tmp_path: Path
) -> None:
    bucket, files = dataset
    done = run_prefetch(
        "--dataset", "labels", "--version", "v1", "--cache-root", str(tmp_path),
        "--source", f"s3://{bucket}/imagenet/2024-06/train/shard-00001.tar",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert tree_digests(version_dir(tmp_path, "labels", "v1")) == digests(
        {"shard-00001.tar": files["train/shard-00001.tar"]}
    )


def test_endpoint_flag_wins_over_environment(
    run_prefetch: RunPrefetch, s3: S3Server, dataset: tuple[str, dict[str, bytes]], tmp_path: Path
) -> None:
    bucket, _ = dataset
    done = run_prefetch(
        "--dataset", "d", "--version", "v", "--cache-root", str(tmp_path),
        "--source", f"s3://{bucket}/imagenet/2024-06/README.txt",
        "--s3-endpoint-url", s3.endpoint,
        env={"AWS_ENDPOINT_URL": "http://127.0.0.1:9", "AWS_ENDPOINT_URL_S3": "http://127.0.0.1:9"},
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert (version_dir(tmp_path, "d", "v") / "README.txt").read_bytes() == b"imagenet subset\n"


def test_missing_bucket_fails_with_one_message_and_leaves_nothing(
    run_prefetch: RunPrefetch, tmp_path: Path
) -> None:
    source = f"s3://no-such-bucket-{os.getpid()}/imagenet/"
    done = run_prefetch(
        "--dataset", "imagenet", "--version", "v9", "--source", source,
        "--cache-root", str(tmp_path),
    )  # fmt: skip
    assert done.returncode == 3
    errors = [line for line in done.stderr.splitlines() if " ERROR " in line]
    assert len(errors) == 1 and source in errors[0], done.stderr
    assert "Traceback" not in done.stderr
    assert not version_dir(tmp_path, "imagenet", "v9").exists()
    assert leftovers(tmp_path / "imagenet") == []


@pytest.mark.parametrize("where", ["imagenet/1999-01/", "imagenet/nope.tar", "imagenet/2024"])
def test_missing_prefix_or_object_is_not_found(
    s3: S3Server,
    dataset: tuple[str, dict[str, bytes]],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    where: str,
) -> None:
    """In-process (same code as the CLI, without a process start per case)."""
    for key, value in FAKE_AWS.items():
        monkeypatch.setenv(key, value)
    bucket, _ = dataset
    source = f"s3://{bucket}/{where}"
    request = PrefetchRequest(
        dataset="imagenet",
        version="v9",
        source=source,
        cache_root=tmp_path,
        s3_endpoint_url=s3.endpoint,
    )
    with pytest.raises(SourceNotFound, match=re.escape(source)):
        prefetch(request)
    assert not version_dir(tmp_path, "imagenet", "v9").exists()
    assert leftovers(tmp_path / "imagenet") == []


@pytest.fixture
def refusing_endpoint() -> Iterator[str]:
    """A bound socket that never listens: connections to it are refused, and the port stays
    ours for the whole test."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    try:
        yield f"http://127.0.0.1:{sock.getsockname()[1]}"
    finally:
        sock.close()


def test_network_failure_after_retries_exits_5(
    run_prefetch: RunPrefetch, refusing_endpoint: str, tmp_path: Path
) -> None:
    done = run_prefetch(
        "--dataset", "d", "--version", "v", "--source", "s3://bucket/prefix/",
        "--cache-root", str(tmp_path), "--retries", "2",
        env={"AWS_ENDPOINT_URL": refusing_endpoint, "AWS_MAX_ATTEMPTS": "1"},
    )  # fmt: skip
    assert done.returncode == 5, done.stderr
    error = [line for line in done.stderr.splitlines() if " ERROR " in line]
    assert len(error) == 1
    assert "s3://bucket/prefix/" in error[0] and "unreachable after 2 attempts" in error[0]
    assert not version_dir(tmp_path, "d", "v").exists()


def _start(
    python: str, repo_root: Path, env: dict[str, str], log: Path, *args: str
) -> subprocess.Popen[bytes]:
    with log.open("wb") as out:
        return subprocess.Popen(
            [python, "-m", "agent", "prefetch", *args],
            cwd=repo_root,
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=out,
        )


def test_two_concurrent_prefetches_download_once(
    python: str,
    repo_root: Path,
    prefetch_env: dict[str, str],
    s3: S3Server,
    dataset: tuple[str, dict[str, bytes]],
    tmp_path: Path,
) -> None:
    bucket, files = dataset
    cache = tmp_path / "cache"
    args = (
        "--dataset", "imagenet", "--version", "2024-06", "--cache-root", str(cache),
        "--source", f"s3://{bucket}/imagenet/2024-06/", "--parallel", "2",
    )  # fmt: skip
    logs = [tmp_path / "a.log", tmp_path / "b.log"]
    procs = [_start(python, repo_root, prefetch_env, log, *args) for log in logs]
    codes = [p.wait(timeout=60) for p in procs]
    stderr = [log.read_text() for log in logs]

    assert codes == [0, 0], stderr
    assert sum("downloading imagenet@2024-06" in text for text in stderr) == 1, stderr
    assert sum("cache hit" in text for text in stderr) == 1, stderr
    # each small object was read exactly once from the store
    for rel in ("README.txt", "train/shard-00000.tar", "train/deep/er/labels.json"):
        assert len(s3.gets(bucket, f"imagenet/2024-06/{rel}")) == 1
    assert tree_digests(version_dir(cache, "imagenet", "2024-06")) == digests(files)


def test_waiter_reports_holder_then_finds_the_version_complete(
    python: str,
    repo_root: Path,
    prefetch_env: dict[str, str],
    s3: S3Server,
    dataset: tuple[str, dict[str, bytes]],
    tmp_path: Path,
) -> None:
    """While another writer holds the lock the prefetch waits and says for whom; when that
    writer leaves a complete version behind, the waiter exits 0 without touching the store."""
    bucket, _ = dataset
    (tmp_path / "imagenet").mkdir()
    log = tmp_path / "waiter.log"
    with DatasetLock(lock_path(tmp_path, "imagenet")):
        proc = _start(
            python, repo_root, prefetch_env, log,
            "--dataset", "imagenet", "--version", "2024-06", "--cache-root", str(tmp_path),
            "--source", f"s3://{bucket}/imagenet/2024-06/",
        )  # fmt: skip
        deadline = time.monotonic() + 30
        while f"held by pid {os.getpid()}" not in log.read_text():
            assert proc.poll() is None, log.read_text()
            assert time.monotonic() < deadline, log.read_text()
            time.sleep(0.05)
        # the "other writer" finishes its version, marker last
        version_dir(tmp_path, "imagenet", "2024-06").mkdir()
        marker_path(tmp_path, "imagenet", "2024-06").write_text("{}")
        before = len(s3.requests)
    assert proc.wait(timeout=30) == 0, log.read_text()
    assert "finished by another prefetch" in log.read_text()
    assert s3.requests[before:] == []
