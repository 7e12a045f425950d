"""`topoplace-agent prefetch` against a real S3 server (moto, loopback)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import time
from pathlib import Path

import pytest

from agent.cache.lock import DatasetLock
from agent.cache.prefetch import PrefetchRequest, prefetch
from agent.cache.source_errors import RetryPolicy, SourceNotFound, SourceUnreachable
from common.cache_layout import lock_path, marker_path, version_dir
from tests.agent.cache.conftest import FAKE_AWS, RunPrefetch, S3Server
from tests.agent.cache.helpers import digests, leftovers, sample_tree, tree_digests


@pytest.fixture
def prefetch_env(prefetch_env: dict[str, str], s3: S3Server) -> dict[str, str]:
    """CLI runs find the S3 server through AWS_ENDPOINT_URL, as a pod would."""
    return {**prefetch_env, "AWS_ENDPOINT_URL": s3.endpoint}


@pytest.fixture
def aws_env(monkeypatch: pytest.MonkeyPatch, s3: S3Server) -> None:
    """The same for in-process runs (no process start per case)."""
    for key in [k for k in os.environ if k.startswith("AWS_")]:
        monkeypatch.delenv(key)
    for key, value in FAKE_AWS.items():
        monkeypatch.setenv(key, value)
    monkeypatch.setenv("AWS_ENDPOINT_URL", s3.endpoint)
    monkeypatch.setenv("AWS_MAX_ATTEMPTS", "1")


@pytest.fixture(scope="module")
def dataset(s3: S3Server) -> tuple[str, dict[str, bytes]]:
    """Uploaded once for the module; tests only read it."""
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
    before = len(s3.requests)
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
    # every object was read with one GET, none twice
    assert len(s3.gets(bucket, "imagenet/2024-06/val/big.bin", since=before)) == 1
    assert len(s3.gets(bucket, "imagenet/2024-06/train/", since=before)) == 3


@pytest.mark.usefixtures("aws_env")
def test_second_run_is_a_cache_hit_without_reading_the_store(
    run_prefetch: RunPrefetch, s3: S3Server, tmp_path: Path
) -> None:
    bucket = s3.new_bucket()
    files = {"a.txt": b"a", "deep/b.bin": os.urandom(70_000)}
    s3.put_tree(bucket, "imagenet/2024-06/", files)
    source = f"s3://{bucket}/imagenet/2024-06/"
    first = prefetch(PrefetchRequest("imagenet", "2024-06", source, cache_root=tmp_path))
    assert not first.cache_hit and first.files == len(files)
    for rel in files:  # the store loses the data: only the cache can answer now
        s3.client.delete_object(Bucket=bucket, Key=f"imagenet/2024-06/{rel}")
    before = len(s3.requests)

    again = run_prefetch(
        "--dataset", "imagenet", "--version", "2024-06", "--source", source,
        "--cache-root", str(tmp_path),
    )  # fmt: skip

    assert again.returncode == 0, again.stderr
    assert "cache hit" in again.stderr
    assert s3.requests[before:] == []
    assert tree_digests(version_dir(tmp_path, "imagenet", "2024-06")) == digests(files)


@pytest.mark.usefixtures("aws_env")
def test_single_object_source_lands_under_its_name(
    dataset: tuple[str, dict[str, bytes]], tmp_path: Path
) -> None:
    bucket, files = dataset
    source = f"s3://{bucket}/imagenet/2024-06/train/shard-00001.tar"
    prefetch(PrefetchRequest("labels", "v1", source, cache_root=tmp_path))
    assert tree_digests(version_dir(tmp_path, "labels", "v1")) == digests(
        {"shard-00001.tar": files["train/shard-00001.tar"]}
    )


@pytest.mark.usefixtures("aws_env")
@pytest.mark.parametrize("env_name", ["AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3", None])
def test_endpoint_from_flag_or_environment(
    s3: S3Server,
    dataset: tuple[str, dict[str, bytes]],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    refusing_endpoint: str,
    env_name: str | None,
) -> None:
    """The flag wins over both variables; AWS_ENDPOINT_URL_S3 wins over AWS_ENDPOINT_URL."""
    bucket, _ = dataset
    monkeypatch.setenv("AWS_ENDPOINT_URL", refusing_endpoint)
    flag = None
    if env_name is None:
        monkeypatch.setenv("AWS_ENDPOINT_URL_S3", refusing_endpoint)
        flag = s3.endpoint
    else:
        monkeypatch.setenv(env_name, s3.endpoint)
    source = f"s3://{bucket}/imagenet/2024-06/README.txt"
    prefetch(PrefetchRequest("d", "v", source, cache_root=tmp_path, s3_endpoint_url=flag))
    assert (version_dir(tmp_path, "d", "v") / "README.txt").read_bytes() == b"imagenet subset\n"


@pytest.mark.usefixtures("aws_env")
@pytest.mark.parametrize(
    "where",
    [
        "no-such-bucket/imagenet/",
        "{b}/imagenet/1999-01/",
        "{b}/imagenet/nope.tar",
        "{b}/imagenet/2024",
    ],
)
def test_missing_prefix_or_object_is_not_found(
    s3: S3Server,
    dataset: tuple[str, dict[str, bytes]],
    tmp_path: Path,
    where: str,
) -> None:
    bucket, _ = dataset
    source = "s3://" + where.format(b=bucket)
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


@pytest.mark.usefixtures("aws_env")
def test_network_failure_after_retries(refusing_endpoint: str, tmp_path: Path) -> None:
    pauses: list[float] = []
    request = PrefetchRequest(
        "d", "v", "s3://bucket/prefix/", cache_root=tmp_path, s3_endpoint_url=refusing_endpoint
    )
    with pytest.raises(SourceUnreachable, match=r"s3://bucket/prefix/: unreachable after 3"):
        prefetch(request, retry=RetryPolicy(attempts=3, sleep=pauses.append))
    assert len(pauses) == 2
    assert not version_dir(tmp_path, "d", "v").exists()
    assert leftovers(tmp_path / "d") == []


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
    before = len(s3.requests)
    procs = [_start(python, repo_root, prefetch_env, log, *args) for log in logs]
    codes = [p.wait(timeout=60) for p in procs]
    stderr = [log.read_text() for log in logs]

    assert codes == [0, 0], stderr
    assert sum("downloading imagenet@2024-06" in text for text in stderr) == 1, stderr
    assert sum("cache hit" in text for text in stderr) == 1, stderr
    # each small object was read exactly once from the store
    for rel in ("README.txt", "train/shard-00000.tar", "train/deep/er/labels.json"):
        assert len(s3.gets(bucket, f"imagenet/2024-06/{rel}", since=before)) == 1
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


@pytest.mark.usefixtures("aws_env")
def test_multipart_object_is_checked_by_size(s3: S3Server, tmp_path: Path) -> None:
    """A multipart upload's ETag ("<hex>-N") is no MD5 of the content: size only, no false
    integrity failure."""
    bucket = s3.new_bucket()
    body = os.urandom(5 * 1024 * 1024 + 100)
    upload = s3.client.create_multipart_upload(Bucket=bucket, Key="ckpt/model.bin")
    parts = []
    for number, chunk in enumerate((body[: 5 * 1024 * 1024], body[5 * 1024 * 1024 :]), 1):
        etag = s3.client.upload_part(
            Bucket=bucket, Key="ckpt/model.bin", UploadId=upload["UploadId"],
            PartNumber=number, Body=chunk,
        )["ETag"]  # fmt: skip
        parts.append({"ETag": etag, "PartNumber": number})
    s3.client.complete_multipart_upload(
        Bucket=bucket, Key="ckpt/model.bin", UploadId=upload["UploadId"],
        MultipartUpload={"Parts": parts},
    )  # fmt: skip
    assert s3.client.head_object(Bucket=bucket, Key="ckpt/model.bin")["ETag"].endswith('-2"')

    prefetch(PrefetchRequest("ckpt", "1", f"s3://{bucket}/ckpt/", cache_root=tmp_path))

    assert (version_dir(tmp_path, "ckpt", "1") / "model.bin").read_bytes() == body
