"""--max-cache-bytes: least recently used versions of other datasets go, locked ones stay."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from agent.cache.evict import CachedVersion, choose_evictions, scan_cache
from agent.cache.lock import DatasetLock, is_locked_by_other
from agent.cache.prefetch import PrefetchRequest, prefetch
from common.cache_layout import lock_path, marker_path, version_dir
from tests.agent.cache.conftest import RunPrefetch
from tests.agent.cache.helpers import write_tree


def v(name: str, version: str, size: int, used: float) -> CachedVersion:
    return CachedVersion(name=name, version=version, bytes=size, last_used=used)


CACHE = [
    v("a", "1", 100, 30.0),
    v("b", "1", 100, 10.0),
    v("c", "1", 100, 20.0),
    v("new", "0", 50, 5),
]


@pytest.mark.parametrize(
    ("incoming", "limit", "locked", "evicted", "fits"),
    [
        (100, 1000, (), [], True),  # room enough: nothing goes
        (100, 400, (), [("b", "1")], True),  # oldest first
        (100, 300, (), [("b", "1"), ("c", "1")], True),
        (100, 400, ("b",), [("c", "1")], True),  # locked b is skipped
        (100, 100, ("b",), [("c", "1"), ("a", "1")], False),  # never the kept dataset
    ],
)
def test_choose_evictions(
    incoming: int,
    limit: int,
    locked: tuple[str, ...],
    evicted: list[tuple[str, str]],
    fits: bool,
) -> None:
    plan = choose_evictions(
        CACHE, incoming_bytes=incoming, max_cache_bytes=limit, keep_dataset="new", locked=locked
    )
    assert [(e.name, e.version) for e in plan.evict] == evicted
    assert plan.fits is fits
    assert plan.used_bytes == 350


def _cached(root: Path, src_root: Path, name: str, size: int, used: float) -> None:
    src = write_tree(src_root / name, {"data.bin": os.urandom(size)})
    prefetch(PrefetchRequest(dataset=name, version="v1", source=src.as_uri(), cache_root=root))
    os.utime(marker_path(root, name, "v1"), (used, used))


def test_prefetch_evicts_lru_other_datasets_but_not_a_locked_one(
    run_prefetch: RunPrefetch, tmp_path: Path
) -> None:
    root = tmp_path / "cache"
    _cached(root, tmp_path / "src", "oldest-locked", 100_000, used=1_000)
    _cached(root, tmp_path / "src", "old", 100_000, used=2_000)
    _cached(root, tmp_path / "src", "recent", 100_000, used=3_000)
    incoming = write_tree(tmp_path / "src" / "incoming", {"x.bin": os.urandom(100_000)})

    with DatasetLock(lock_path(root, "oldest-locked")):  # another pod is writing it
        assert is_locked_by_other(lock_path(root, "oldest-locked"))
        done = run_prefetch(
            "--dataset", "incoming", "--version", "v1", "--source", incoming.as_uri(),
            "--cache-root", str(root), "--max-cache-bytes", "350000",
        )  # fmt: skip

    assert done.returncode == 0, done.stderr
    assert not version_dir(root, "old", "v1").exists()
    assert marker_path(root, "oldest-locked", "v1").is_file()
    assert marker_path(root, "recent", "v1").is_file()
    assert marker_path(root, "incoming", "v1").is_file()
    assert "evicting old@v1" in done.stderr
    assert {(c.name, c.version) for c in scan_cache(root)} == {
        ("oldest-locked", "v1"),
        ("recent", "v1"),
        ("incoming", "v1"),
    }


def test_a_cache_hit_counts_as_use(tmp_path: Path) -> None:
    root = tmp_path / "cache"
    _cached(root, tmp_path / "src", "d", 10, used=1_000)
    src = (tmp_path / "src" / "d").as_uri()
    result = prefetch(PrefetchRequest(dataset="d", version="v1", source=src, cache_root=root))
    assert result.cache_hit
    (cached,) = scan_cache(root)
    assert cached.last_used > 1_000_000  # touched now, not the 1970 time set above


def test_lock_is_exclusive_between_holders(tmp_path: Path) -> None:
    path = tmp_path / "lock"
    first = DatasetLock(path)
    assert first.try_acquire()
    assert not DatasetLock(path).try_acquire()
    first.release()
    assert not is_locked_by_other(path)
    assert DatasetLock(path).try_acquire()
