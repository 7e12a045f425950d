"""Make room under `--max-cache-bytes` by evicting least recently used complete versions of
other datasets, never one whose dataset is locked (being written) right now and never one a
pod holds a lease on (lease.py): a version in use stays until its last user is gone, and is
evictable from that moment.

"Last used" is the later of the marker file's mtime and atime. The marker's mtime is set when
the version completes, and the prefetcher touches the marker on every cache hit (each pod that
asks for the version), so it tracks use even on `noatime`/`relatime` mounts where atime alone
would not. The choice (`choose_evictions`) is a pure function; scanning and deleting are apart.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import tempfile
from collections.abc import Collection, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from agent.cache.durable import fsync_dir
from agent.cache.lease import guard, holders, in_use
from agent.cache.lock import DatasetLock, try_lock
from common.cache_layout import MARKER_FILE, TEMP_PREFIX, lock_path, marker_path, version_dir

__all__ = [
    "CachedVersion",
    "EvictionPlan",
    "choose_evictions",
    "evict_version",
    "make_room",
    "scan_cache",
]

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class CachedVersion:
    name: str
    version: str
    bytes: int
    last_used: float  # seconds since the epoch


@dataclass(frozen=True, slots=True)
class EvictionPlan:
    evict: tuple[CachedVersion, ...]
    used_bytes: int  # complete versions in the cache before eviction
    fits: bool  # whether the incoming bytes fit the budget after the evictions


def choose_evictions(
    cached: Sequence[CachedVersion],
    *,
    incoming_bytes: int,
    max_cache_bytes: int,
    keep_dataset: str,
    locked: Collection[str] = (),
    leased: Collection[tuple[str, str]] = (),
) -> EvictionPlan:
    """Oldest-used first among versions of datasets other than `keep_dataset` and not in
    `locked`, and not `leased` (name, version), until the cache plus `incoming_bytes` fits."""
    used = sum(v.bytes for v in cached)
    excess = used + incoming_bytes - max_cache_bytes
    candidates = sorted(
        (
            v
            for v in cached
            if v.name != keep_dataset and v.name not in locked and (v.name, v.version) not in leased
        ),
        key=lambda v: (v.last_used, v.name, v.version),
    )
    chosen: list[CachedVersion] = []
    for v in candidates:
        if excess <= 0:
            break
        chosen.append(v)
        excess -= v.bytes
    return EvictionPlan(evict=tuple(chosen), used_bytes=used, fits=excess <= 0)


def _tree_bytes(path: Path) -> int:
    total = 0
    for dirpath, _dirs, files in os.walk(path):
        for f in files:
            try:
                total += (Path(dirpath) / f).lstat().st_size
            except OSError:
                continue  # vanished while walking
    return total


def _marker_bytes(marker: Path) -> int | None:
    try:
        value = json.loads(marker.read_text(encoding="utf-8")).get("bytes")
    except (OSError, ValueError, AttributeError):
        return None
    return value if isinstance(value, int) and value >= 0 else None


def _dataset_names(root: Path) -> list[str]:
    """Dataset directories (not the lease tree or other hidden entries)."""
    return sorted(p.name for p in root.iterdir() if p.is_dir() and not p.name.startswith("."))


def _complete_versions(root: Path) -> Iterator[tuple[str, str, Path]]:
    for name_dir in (root / n for n in _dataset_names(root)):
        for vdir in sorted(p for p in name_dir.iterdir() if p.is_dir()):
            if not vdir.name.startswith(TEMP_PREFIX) and (vdir / MARKER_FILE).is_file():
                yield name_dir.name, vdir.name, vdir / MARKER_FILE


def scan_cache(root: Path) -> list[CachedVersion]:
    """Every complete version under `root`, sized from its marker (walked if unreadable)."""
    if not root.is_dir():
        return []
    out: list[CachedVersion] = []
    for name, version, marker in _complete_versions(root):
        try:
            st = marker.stat()
        except OSError:
            continue  # evicted meanwhile
        size = _marker_bytes(marker)
        if size is None:
            size = _tree_bytes(marker.parent)
        out.append(CachedVersion(name, version, size, max(st.st_mtime, st.st_atime)))
    return out


def evict_version(root: Path, name: str, version: str) -> bool:
    """Delete one version unless a pod holds a lease on it; the caller holds its dataset's
    lock. Under the version's guard the marker goes first, so an interrupted eviction leaves
    an incomplete version or a temporary directory, never a directory that looks complete
    (the next prefetch of that dataset removes the remains), and a leaser that comes after
    sees no marker. Returns False when it was in use and stays."""
    vdir = version_dir(root, name, version)
    with guard(root, name, version) as ldir:
        if holders(ldir):
            return False
        marker_path(root, name, version).unlink(missing_ok=True)
        fsync_dir(vdir)
        doomed = Path(tempfile.mkdtemp(prefix=f"{TEMP_PREFIX}evict-{version}-", dir=vdir.parent))
        os.rename(vdir, doomed / version)
    shutil.rmtree(doomed)  # outside the guard: it may take a while and nobody can see it
    return True


def make_room(
    root: Path, *, keep_dataset: str, incoming_bytes: int, max_cache_bytes: int
) -> EvictionPlan:
    """Scan, lock every other dataset that is free, choose, evict, unlock."""
    names = _dataset_names(root) if root.is_dir() else []
    held: list[DatasetLock] = []
    locked: set[str] = set()
    try:
        for name in names:
            if name == keep_dataset:
                continue
            lock = try_lock(lock_path(root, name))
            if lock is None:
                locked.add(name)
            else:
                held.append(lock)
        cached = scan_cache(root)  # after locking: what is free cannot change under us now
        used = sum(v.bytes for v in cached)
        leased = in_use(root)  # a snapshot; each eviction re-checks under the version's guard
        evicted: list[CachedVersion] = []
        while True:
            plan = choose_evictions(
                [v for v in cached if v not in evicted],
                incoming_bytes=incoming_bytes,
                max_cache_bytes=max_cache_bytes,
                keep_dataset=keep_dataset,
                locked=locked,
                leased=leased,
            )
            raced = _evict_all(root, plan.evict, evicted)
            if raced is None:
                break
            leased.add(raced)  # leased since the snapshot: plan again without it
        plan = EvictionPlan(evict=tuple(evicted), used_bytes=used, fits=plan.fits)
    finally:
        for lock in held:
            lock.release()
    if not plan.fits:
        log.warning(
            "cache stays above --max-cache-bytes=%d: nothing else may be evicted "
            "(locked: %s; in use: %d versions); downloading anyway",
            max_cache_bytes,
            ", ".join(sorted(locked)) or "none",
            len(leased),
        )
    return plan


def _evict_all(
    root: Path, chosen: Sequence[CachedVersion], evicted: list[CachedVersion]
) -> tuple[str, str] | None:
    """Evict in order; stop at the first version found leased, and return it."""
    for v in chosen:
        log.info(
            "evicting %s@%s (%d bytes) to stay under --max-cache-bytes",
            v.name,
            v.version,
            v.bytes,
            extra={"dataset": v.name, "version": v.version, "bytes": v.bytes},
        )
        if not evict_version(root, v.name, v.version):
            log.info("%s@%s is in use by a pod since the scan; keeping it", v.name, v.version)
            return v.name, v.version
        evicted.append(v)
    return None
