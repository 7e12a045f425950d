"""The obstore transfer engine (the default for s3://) against a real S3 server (moto):
large objects come as parallel ranges and arrive byte-identical, MD5-checked; both engines
produce the same cache; a corrupted object is caught on every attempt."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import pytest

from agent.cache import s3_obstore
from agent.cache.prefetch import PrefetchRequest, prefetch
from agent.cache.source_errors import IntegrityError, RetryPolicy
from common.backoff import BackoffPolicy
from common.cache_layout import version_dir
from tests.agent.cache.conftest import FAKE_AWS, S3Server
from tests.agent.cache.helpers import digests, tree_digests

MIB = 1024 * 1024


@pytest.fixture(autouse=True)
def aws_env(monkeypatch: pytest.MonkeyPatch, s3: S3Server) -> None:
    for key in [k for k in os.environ if k.startswith("AWS_")]:
        monkeypatch.delenv(key)
    for key, value in FAKE_AWS.items():
        monkeypatch.setenv(key, value)
    monkeypatch.setenv("AWS_ENDPOINT_URL", s3.endpoint)


@pytest.fixture
def small_parts(monkeypatch: pytest.MonkeyPatch) -> None:
    """Ranged transfers from 1 MiB up, in 256 KiB parts, 3 in flight: many parts, little data."""
    monkeypatch.setattr(s3_obstore, "RANGED_MIN", MIB)
    monkeypatch.setattr(s3_obstore, "PART", 256 * 1024)
    monkeypatch.setattr(s3_obstore, "MAX_PARTS", 3)


@pytest.mark.usefixtures("small_parts")
def test_large_objects_arrive_as_parallel_ranges_byte_identical(
    s3: S3Server, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    bucket = s3.new_bucket()
    files = {
        "big/a.bin": os.urandom(3 * MIB + 5),  # 13 parts, the last one 5 bytes
        "big/b.bin": os.urandom(MIB),  # exactly the threshold
        "small.txt": b"not ranged\n",
    }
    s3.put_tree(bucket, "ds/", files)
    before = len(s3.requests)

    result = prefetch(PrefetchRequest("ds", "v1", f"s3://{bucket}/ds/", cache_root=tmp_path))

    assert tree_digests(version_dir(tmp_path, "ds", "v1")) == digests(files)
    assert result.bytes == sum(len(b) for b in files.values())
    gets = s3.gets(bucket, "ds/big/a.bin", since=before)
    assert len(gets) == 13  # one GET per range, none for the whole object
    # The MD5 hashed part by part, in order, matched each ETag the first time.
    assert "fetching the file again" not in caplog.text
    assert "ETag is not the content MD5" not in caplog.text


def test_both_engines_fill_the_cache_identically(s3: S3Server, tmp_path: Path) -> None:
    bucket = s3.new_bucket()
    files = {f"d/{i:03d}.bin": hashlib.sha256(bytes([i])).digest() * 40 for i in range(30)}
    s3.put_tree(bucket, "x/", files)
    for engine in ("obstore", "s3fs"):
        root = tmp_path / engine
        req = PrefetchRequest("x", "v1", f"s3://{bucket}/x/", cache_root=root, s3_engine=engine)
        prefetch(req)
        assert tree_digests(version_dir(root, "x", "v1")) == digests(files), engine


@pytest.mark.usefixtures("small_parts")
def test_a_ranged_object_whose_bytes_differ_from_its_etag_fails_integrity(
    s3: S3Server, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    bucket = s3.new_bucket()
    s3.put_tree(bucket, "c/", {"big.bin": os.urandom(2 * MIB)})
    import obstore

    real, tries = obstore.get_range_async, [0]

    async def flip_a_byte(store: object, path: str, *, start: int, end: int) -> bytes:
        data = bytearray(memoryview(await real(store, path, start=start, end=end)))
        if start == 0:  # bits flipped in transit, past TCP's checksum, differently each time
            tries[0] += 1
            data[tries[0]] ^= 0xFF
        return bytes(data)

    monkeypatch.setattr(obstore, "get_range_async", flip_a_byte)
    retry = RetryPolicy(attempts=2, backoff=BackoffPolicy(initial=0.01, cap=0.02, floor=0.01))
    with pytest.raises(IntegrityError, match="MD5"):
        prefetch(PrefetchRequest("c", "v1", f"s3://{bucket}/c/", cache_root=tmp_path), retry=retry)
    assert not version_dir(tmp_path, "c", "v1").exists()
