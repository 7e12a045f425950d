"""Leases: which pods use which cached version, so eviction never removes data a pod reads.

One file per pod and version, `<root>/.topoplace-leases/<name>/<version>/<pod-uid>`
(common.cache_layout). Writers:
- the prefetch init container, for its own pod (UID from the downward API), cache hit
  included, before it looks for the marker;
- the agent, for every pod on its node that mounts a version through the cache hostPath,
  prefetch or not; it also removes the leases of pods that are gone (`sweep`).

The race with eviction is closed by the version's guard, an flock on `.lock` in the version's
lease directory: the leaser writes its lease and then checks the marker under the guard, the
evictor checks for leases and then removes the marker under it. Whichever comes second sees
the other's work. flock dies with its holder, so a SIGKILL leaves no guard held; a lease file
is written by rename, so a SIGKILL leaves no half lease either (a temporary at most, swept).
"""

from __future__ import annotations

import fcntl
import json
import logging
import os
import tempfile
from collections.abc import Collection, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from common.cache_layout import LEASE_DIR, TEMP_PREFIX, lease_dir, marker_path

__all__ = [
    "GUARD_FILE",
    "Lease",
    "drop",
    "guard",
    "holders",
    "in_use",
    "lease_and_check",
    "leases",
    "release",
    "sweep",
]

log = logging.getLogger(__name__)

GUARD_FILE = ".lock"
# Lease entries are shared by the prefetchers (the cache owner) and the agent (the cache owner,
# or root in its group for the placement audit): group-writable, and directories setgid so
# that everything below stays in the cache owner's group (prepare-cache sets the top).
_DIR_MODE = 0o2775
_FILE_MODE = 0o664


def _shared_dirs(leaf: Path) -> None:
    """Create `leaf` and its missing parents, each group-writable and setgid."""
    missing = []
    path = leaf
    while not path.is_dir():
        missing.append(path)
        path = path.parent
    for path in reversed(missing):
        try:
            path.mkdir()
        except FileExistsError:
            continue  # another writer made it meanwhile; it set the mode
        os.chmod(path, _DIR_MODE)  # mkdir's mode passes through the umask


@dataclass(frozen=True, slots=True)
class Lease:
    name: str
    version: str
    pod_uid: str
    written: float  # mtime, seconds since the epoch
    path: Path


def _lease_name_ok(uid: str) -> bool:
    # A pod UID is a UUID; refuse anything that could climb out of the directory.
    return bool(uid) and "/" not in uid and not uid.startswith(".") and len(uid) <= 128


@contextmanager
def guard(root: Path, name: str, version: str) -> Iterator[Path]:
    """Hold the version's guard (blocking; every holder keeps it for a few file operations)."""
    ldir = lease_dir(root, name, version)
    _shared_dirs(ldir)
    fd = os.open(ldir / GUARD_FILE, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, _FILE_MODE)
    try:
        if os.fstat(fd).st_uid == os.geteuid():
            os.fchmod(fd, _FILE_MODE)  # ours: the umask may have taken the group's write
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield ldir
    finally:
        os.close(fd)  # closing drops the flock


def _write(ldir: Path, uid: str, writer: str) -> None:
    doc = {"pod_uid": uid, "writer": writer, "pid": os.getpid()}
    fd, tmp = tempfile.mkstemp(prefix=TEMP_PREFIX, dir=ldir)
    try:
        os.fchmod(fd, _FILE_MODE)
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            json.dump(doc, out)
        os.rename(tmp, ldir / uid)  # also refreshes the mtime `sweep` compares
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def lease_and_check(root: Path, name: str, version: str, uid: str, *, writer: str) -> bool:
    """Record that pod `uid` uses name@version; True when the version is complete right now
    (then it cannot be evicted while the lease stands)."""
    if not _lease_name_ok(uid):
        raise ValueError(f"pod UID {uid!r} cannot name a lease file")
    with guard(root, name, version) as ldir:
        _write(ldir, uid, writer)
        return marker_path(root, name, version).is_file()


def holders(ldir: Path) -> set[str]:
    """Pod UIDs holding a lease in one version's lease directory (the caller holds its guard)."""
    try:
        names = os.listdir(ldir)
    except FileNotFoundError:
        return set()
    return {n for n in names if not n.startswith(".")}


def leases(root: Path) -> list[Lease]:
    """Every lease under the cache root."""
    base = root / LEASE_DIR
    out: list[Lease] = []
    if not base.is_dir():
        return out
    for name_dir in sorted(base.iterdir()):
        if not name_dir.is_dir():
            continue
        for vdir in sorted(name_dir.iterdir()):
            for uid in sorted(holders(vdir)):
                path = vdir / uid
                try:
                    written = path.stat().st_mtime
                except OSError:
                    continue  # dropped meanwhile
                out.append(Lease(name_dir.name, vdir.name, uid, written, path))
    return out


def in_use(root: Path) -> set[tuple[str, str]]:
    """(name, version) pairs with at least one lease: a snapshot, re-checked under the guard."""
    return {(lease.name, lease.version) for lease in leases(root)}


def drop(root: Path, uid: str) -> int:
    """Remove every lease of pod `uid`; returns how many went."""
    gone = 0
    for lease in leases(root):
        if lease.pod_uid == uid:
            lease.path.unlink(missing_ok=True)
            gone += 1
    return gone


def release(root: Path, name: str, version: str, uid: str) -> None:
    """Remove pod `uid`'s lease on name@version (the pod no longer mounts it)."""
    if _lease_name_ok(uid):
        (lease_dir(root, name, version) / uid).unlink(missing_ok=True)


def sweep(root: Path, live: Collection[str], *, listed_at: float) -> list[Lease]:
    """Remove leases of pods not in `live` (the node's pods listed at `listed_at`, wall clock)
    and temporaries a killed writer left. Only files older than the list count: a lease
    written after it may belong to a pod the list could not know yet."""
    removed: list[Lease] = []
    for lease in leases(root):
        if lease.pod_uid not in live and lease.written < listed_at:
            lease.path.unlink(missing_ok=True)
            removed.append(lease)
            log.info(
                "dropped the lease of pod %s on %s@%s: the pod is no longer on this node",
                lease.pod_uid,
                lease.name,
                lease.version,
                extra={"pod_uid": lease.pod_uid, "dataset": lease.name, "version": lease.version},
            )
    base = root / LEASE_DIR
    for tmp in base.glob(f"*/*/{TEMP_PREFIX}*") if base.is_dir() else ():
        try:
            if tmp.stat().st_mtime < listed_at:
                tmp.unlink()
        except OSError:
            continue
    return removed
