"""The obstore transfer engine (the default for s3://) against a real S3 server (moto):
large multipart objects come as parallel ranges, single-part ones as one stream hashed on
the way in, all byte-identical; both engines fill the cache alike; corruption is caught."""

from __future__ import annotations

import hashlib
import os
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest

from agent.cache import ranged, s3_obstore
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
    """Ranged transfers from 1 MiB up, in 512 KiB parts, 3 in flight: many parts, little data."""
    monkeypatch.setattr(s3_obstore, "RANGED_MIN", MIB)
    monkeypatch.setattr(s3_obstore, "SMALL_MAX", 64 * 1024)
    monkeypatch.setattr(s3_obstore, "_CHUNK", 64 * 1024)
    monkeypatch.setattr(ranged, "PART", 512 * 1024)
    monkeypatch.setattr(ranged, "BUF", 64 * 1024)
    monkeypatch.setattr(ranged, "MAX_PARTS", 3)


def _multipart(s3: S3Server, bucket: str, key: str, parts: list[bytes]) -> bytes:
    """Upload as S3 multipart (ETag '<hex>-N', not an MD5)."""
    client = s3.client
    upload = client.create_multipart_upload(Bucket=bucket, Key=key)["UploadId"]
    done = []
    for n, body in enumerate(parts, start=1):
        part = client.upload_part(Bucket=bucket, Key=key, UploadId=upload, PartNumber=n, Body=body)
        done.append({"PartNumber": n, "ETag": part["ETag"]})
    client.complete_multipart_upload(
        Bucket=bucket, Key=key, UploadId=upload, MultipartUpload={"Parts": done}
    )
    return b"".join(parts)


@pytest.mark.usefixtures("small_parts")
def test_large_objects_arrive_as_parallel_ranges_byte_identical(
    s3: S3Server, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    bucket = s3.new_bucket()
    files = {
        "big/b.bin": os.urandom(MIB + 5),  # single part: an MD5 ETag, hashed while streaming
        "small.txt": b"not ranged\n",
    }
    s3.put_tree(bucket, "ds/", files)
    files["big/a.bin"] = _multipart(s3, bucket, "ds/big/a.bin", [os.urandom(5 * MIB), b"tail"])
    before = len(s3.requests)

    result = prefetch(PrefetchRequest("ds", "v1", f"s3://{bucket}/ds/", cache_root=tmp_path))

    assert tree_digests(version_dir(tmp_path, "ds", "v1")) == digests(files)
    assert result.bytes == sum(len(b) for b in files.values())
    assert len(s3.gets(bucket, "ds/big/a.bin", since=before)) == 11  # 5 MiB + 4 B in 512 KiB
    assert len(s3.gets(bucket, "ds/big/b.bin", since=before)) == 1  # one stream, MD5 in order
    # The MD5 hashed on the way in matched the ETag the first time.
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
def test_an_object_whose_bytes_differ_from_its_etag_fails_integrity(
    s3: S3Server, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    bucket = s3.new_bucket()
    s3.put_tree(bucket, "c/", {"big.bin": os.urandom(2 * MIB)})
    import obstore

    real, tries = obstore.get_async, [0]

    class Flipped:  # bits flipped in transit, past TCP's checksum, differently each time
        def __init__(self, resp: object) -> None:
            self.resp = resp

        async def stream(self, min_chunk_size: int) -> AsyncIterator[bytes]:
            first = True
            async for chunk in self.resp.stream(min_chunk_size=min_chunk_size):  # type: ignore[attr-defined]
                data = bytearray(memoryview(chunk))
                if first:
                    tries[0] += 1
                    data[tries[0]] ^= 0xFF
                    first = False
                yield bytes(data)

    async def flip(store: object, path: str, *, options: object = None) -> Flipped:
        return Flipped(await real(store, path, options=options))

    monkeypatch.setattr(obstore, "get_async", flip)
    retry = RetryPolicy(attempts=2, backoff=BackoffPolicy(initial=0.01, cap=0.02, floor=0.01))
    with pytest.raises(IntegrityError, match="MD5"):
        prefetch(PrefetchRequest("c", "v1", f"s3://{bucket}/c/", cache_root=tmp_path), retry=retry)
    assert not version_dir(tmp_path, "c", "v1").exists()


def test_a_small_object_flipped_in_transit_fails_integrity_and_leaves_nothing(
    s3: S3Server, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    bucket = s3.new_bucket()
    s3.put_tree(bucket, "s/", {"a.txt": b"small and single-part\n" * 10})
    import obstore

    real, tries = obstore.get_range_async, [0]

    async def flip(store: object, path: str, *, start: int, end: int) -> bytes:
        data = bytearray(memoryview(await real(store, path, start=start, end=end)))
        tries[0] += 1
        data[tries[0]] ^= 0xFF  # a different corruption each time
        return bytes(data)

    monkeypatch.setattr(obstore, "get_range_async", flip)
    retry = RetryPolicy(attempts=2, backoff=BackoffPolicy(initial=0.01, cap=0.02, floor=0.01))
    with pytest.raises(IntegrityError, match="MD5"):
        prefetch(PrefetchRequest("s", "v1", f"s3://{bucket}/s/", cache_root=tmp_path), retry=retry)
    assert tries[0] == 2
    assert not version_dir(tmp_path, "s", "v1").exists()


def test_an_empty_object_arrives_as_an_empty_file_without_a_get(
    s3: S3Server, tmp_path: Path
) -> None:
    bucket = s3.new_bucket()
    s3.put_tree(bucket, "e/", {"empty.bin": b"", "one.txt": b"1"})
    before = len(s3.requests)

    prefetch(PrefetchRequest("e", "v1", f"s3://{bucket}/e/", cache_root=tmp_path))

    root = version_dir(tmp_path, "e", "v1")
    assert (root / "empty.bin").read_bytes() == b"" and (root / "one.txt").read_bytes() == b"1"
    assert s3.gets(bucket, "e/empty.bin", since=before) == []
    assert len(s3.gets(bucket, "e/one.txt", since=before)) == 1


def _changing_after_listing(monkeypatch: pytest.MonkeyPatch, change: Callable[[], None]) -> None:
    """Run `change` right after the prefetch lists the source, before any byte is fetched."""
    real = s3_obstore.ObstoreS3.find

    def find(self: s3_obstore.ObstoreS3, path: str, detail: bool = True) -> Any:
        listed = real(self, path, detail)
        change()
        return listed

    monkeypatch.setattr(s3_obstore.ObstoreS3, "find", find)


def test_a_small_object_that_grew_since_the_listing_fails_its_size_check(
    s3: S3Server, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A small object is one ranged GET; asking one byte past the listed size keeps a
    whole GET's check: the new, longer version does not pass as a truncated old one."""
    bucket = s3.new_bucket()
    s3.put_tree(bucket, "g/", {"a.txt": b"x" * 100})

    def grow() -> None:
        s3.client.put_object(Bucket=bucket, Key="g/a.txt", Body=b"y" * 300)

    _changing_after_listing(monkeypatch, grow)
    retry = RetryPolicy(attempts=2, backoff=BackoffPolicy(initial=0.01, cap=0.02, floor=0.01))

    with pytest.raises(IntegrityError, match="got 101 bytes, listed as 100"):
        prefetch(PrefetchRequest("g", "v1", f"s3://{bucket}/g/", cache_root=tmp_path), retry=retry)
    assert not version_dir(tmp_path, "g", "v1").exists()


@pytest.mark.usefixtures("small_parts")
def test_a_large_object_replaced_since_the_listing_is_refused_not_stitched(
    s3: S3Server, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Ranges carry If-Match with the listed ETag: same size, new bytes, and no MD5 to catch
    it would otherwise end as a file of two versions."""
    bucket = s3.new_bucket()
    _multipart(s3, bucket, "r/big.bin", [os.urandom(5 * MIB), b"tail"])

    def replace() -> None:
        _multipart(s3, bucket, "r/big.bin", [os.urandom(5 * MIB), b"TAIL"])

    _changing_after_listing(monkeypatch, replace)
    before = len(s3.requests)

    with pytest.raises(IntegrityError, match="changed since the listing"):
        prefetch(PrefetchRequest("r", "v1", f"s3://{bucket}/r/", cache_root=tmp_path))
    assert not version_dir(tmp_path, "r", "v1").exists()
    assert all(r.status == 412 for r in s3.gets(bucket, "r/big.bin", since=before))
