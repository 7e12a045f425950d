"""Prefetch one dataset version into the node cache, atomically and once per node.

Order of work: lease for the pod (when its UID is given) → cache hit? → dataset lock → hit
again (another pod finished it while we waited)? → remove leftovers of killed runs → list the
source → evict (optional) → download into a temporary sibling → fsync → rename to
`<name>/<version>/` → write the marker last.
Whatever point a crash hits, no directory without the marker claims to be complete, and
everything a crash leaves is named with TEMP_PREFIX or lacks the marker, so the next run
(holding the lock) removes it. The lease is written before the hit check, under the version's
guard (lease.py), so no eviction can remove the version between "it is there" and the pod's
workers mounting it; it stays until the agent sees the pod gone.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import tempfile
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from agent.cache.download import download
from agent.cache.durable import flush_tree, fsync_dir
from agent.cache.evict import make_room
from agent.cache.lease import lease_and_check
from agent.cache.lock import DatasetLock
from agent.cache.progress import PrefetchReport, ProgressReporter, format_summary
from agent.cache.source import list_source, open_source
from agent.cache.source_errors import CacheWriteError, RetryPolicy
from common.cache_layout import (
    MARKER_FILE,
    TEMP_PREFIX,
    dataset_dir,
    lock_path,
    marker_path,
    version_dir,
)
from common.k8s_names import is_label_name, is_label_value

__all__ = [
    "InvalidRequest",
    "PrefetchRequest",
    "PrefetchResult",
    "prefetch",
    "request_problem",
]

log = logging.getLogger(__name__)


class InvalidRequest(Exception):
    """The dataset name or version cannot name a cache directory and a node label."""


@dataclass(frozen=True, slots=True)
class PrefetchRequest:
    dataset: str
    version: str
    source: str
    cache_root: Path
    parallel: int = 64  # cheap with obstore: requests, not threads, wait on the network
    max_cache_bytes: int | None = None
    s3_endpoint_url: str | None = None
    pod_uid: str | None = None  # the pod this prefetch serves: its lease keeps the version
    s3_engine: str = "obstore"  # or "s3fs" (source.open_source)


@dataclass(frozen=True, slots=True)
class PrefetchResult:
    path: Path
    cache_hit: bool
    files: int = 0
    bytes: int = 0
    seconds: float = 0.0
    evictions_blocked: bool = False  # make_room could not free enough (evict.py: fits)

    def report(self) -> PrefetchReport:
        return PrefetchReport(
            outcome="hit" if self.cache_hit else "downloaded",
            bytes=self.bytes,
            evictions_blocked=self.evictions_blocked,
        )


def request_problem(dataset: str, version: str) -> str | None:
    """Why `dataset`/`version` cannot be used, or None. Both become path components and the
    node label `dataset.topoplace.io/<dataset>: <version>`, so label rules apply to both."""
    for flag, value, valid in (
        ("--dataset", dataset, is_label_name(dataset)),
        ("--version", version, bool(version) and is_label_value(version)),
    ):
        if not valid or "/" in value or value in (".", "..") or value.startswith(TEMP_PREFIX):
            return (
                f"{flag} {value!r} is invalid: use 1-63 letters, digits, '-', '_' or '.', "
                "starting and ending with a letter or digit (it becomes a directory name and "
                "a node label)"
            )
    return None


def _touch(marker: Path) -> None:
    """Record use for LRU eviction (see evict.py); harmless if the mount is read-only."""
    try:
        os.utime(marker)
    except OSError as exc:
        log.debug("could not touch %s: %s", marker, exc)


def _discard(path: Path) -> None:
    """Remove a leftover; a directory is first renamed to a TEMP_PREFIX name so that a crash
    during the removal still leaves nothing that could pass for a version."""
    if path.is_dir() and not path.is_symlink():
        if not path.name.startswith(TEMP_PREFIX):
            doomed = Path(tempfile.mkdtemp(prefix=f"{TEMP_PREFIX}stale-", dir=path.parent))
            os.rename(path, doomed / path.name)
            path = doomed
        shutil.rmtree(path)
    else:
        path.unlink(missing_ok=True)


def _remove_leftovers(root: Path, name: str, version: str) -> None:
    """Caller holds the dataset lock, so every temporary entry belongs to a dead writer."""
    for entry in sorted(dataset_dir(root, name).iterdir()):
        if entry.name.startswith(TEMP_PREFIX):
            log.info("removing %s left by an interrupted prefetch", entry)
            _discard(entry)
    vdir = version_dir(root, name, version)
    if vdir.exists() or vdir.is_symlink():
        log.info("removing incomplete %s (no %s)", vdir, MARKER_FILE)
        _discard(vdir)


def _write_marker(root: Path, req: PrefetchRequest, *, files: int, size: int) -> None:
    doc = {
        "source": req.source,
        "files": files,
        "bytes": size,
        "completed_at": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
    }
    ddir = dataset_dir(root, req.dataset)
    fd, tmp = tempfile.mkstemp(prefix=f"{TEMP_PREFIX}marker-", dir=ddir)
    try:
        os.fchmod(fd, 0o644)  # mkstemp's 0600 would hide it from non-root readers
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            json.dump(doc, out, indent=2)
            out.write("\n")
            out.flush()
            os.fsync(out.fileno())
        os.rename(tmp, marker_path(root, req.dataset, req.version))
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    fsync_dir(version_dir(root, req.dataset, req.version))


def _hit(marker: Path, req: PrefetchRequest, how: str) -> PrefetchResult:
    _touch(marker)
    try:
        cached_from = json.loads(marker.read_text(encoding="utf-8")).get("source")
    except (OSError, ValueError, AttributeError):
        cached_from = None
    if cached_from and cached_from != req.source:
        # A version names content; a new source for the same version is likely a mistake.
        log.warning(
            "%s@%s was cached from %s, not %s; using the cached copy (bump the version to refetch)",
            req.dataset,
            req.version,
            cached_from,
            req.source,
        )
    log.info(
        "cache hit: %s@%s is complete in %s%s",
        req.dataset,
        req.version,
        marker.parent,
        how,
        extra={"dataset": req.dataset, "version": req.version, "cache_hit": True},
    )
    return PrefetchResult(path=marker.parent, cache_hit=True)


def prefetch(
    req: PrefetchRequest, *, retry: RetryPolicy | None = None, progress_interval_s: float = 2.0
) -> PrefetchResult:
    """Make `<cache_root>/<dataset>/<version>/` complete. Raises InvalidRequest, SourceError,
    CacheWriteError or IntegrityError (source_errors.py) with a message naming what failed."""
    problem = request_problem(req.dataset, req.version)
    if problem:
        raise InvalidRequest(problem)
    retry = retry or RetryPolicy()
    root = req.cache_root
    marker = marker_path(root, req.dataset, req.version)
    ddir = dataset_dir(root, req.dataset)
    try:
        complete = (
            lease_and_check(root, req.dataset, req.version, req.pod_uid, writer="prefetch")
            if req.pod_uid
            else marker.is_file()
        )
    except ValueError as exc:  # a pod UID that cannot name a file
        raise InvalidRequest(f"--pod-uid: {exc}") from exc
    except OSError as exc:
        raise CacheWriteError(exc, root) from exc
    if complete:
        return _hit(marker, req, "")
    try:
        ddir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise CacheWriteError(exc, ddir) from exc
    with DatasetLock(lock_path(root, req.dataset)):
        if marker.is_file():
            return _hit(marker, req, " (finished by another prefetch while this one waited)")
        try:
            _remove_leftovers(root, req.dataset, req.version)
        except OSError as exc:
            raise CacheWriteError(exc, ddir) from exc
        return _fetch_locked(req, retry, progress_interval_s)


def _temporary_version_dir(ddir: Path, version: str) -> Path:
    """A new directory beside the versions that becomes the version once complete."""
    try:
        tmp = Path(tempfile.mkdtemp(prefix=f"{TEMP_PREFIX}{version}-", dir=ddir))
        # mkdtemp makes it 0700; it becomes the version directory, which workers running
        # as any user mount read-only.
        os.chmod(tmp, 0o755)
    except OSError as exc:
        raise CacheWriteError(exc, ddir) from exc
    return tmp


def _fetch_locked(req: PrefetchRequest, retry: RetryPolicy, interval_s: float) -> PrefetchResult:
    root = req.cache_root
    src = open_source(
        req.source,
        s3_endpoint_url=req.s3_endpoint_url,
        s3_engine=req.s3_engine,
        attempts=retry.attempts,
    )
    files = list_source(src, retry=retry)
    total = sum(f.size or 0 for f in files)  # unknown HTTP sizes count as 0 until read
    log.info(
        "downloading %s@%s: %d files, %d bytes from %s with %d workers",
        req.dataset,
        req.version,
        len(files),
        total,
        req.source,
        req.parallel,
        extra={"dataset": req.dataset, "version": req.version, "files": len(files)},
    )
    blocked = False
    if req.max_cache_bytes is not None:
        blocked = not make_room(
            root,
            keep_dataset=req.dataset,
            incoming_bytes=total,
            max_cache_bytes=req.max_cache_bytes,
        ).fits
    ddir = dataset_dir(root, req.dataset)
    vdir = version_dir(root, req.dataset, req.version)
    tmp = _temporary_version_dir(ddir, req.version)
    started = time.monotonic()
    progress = ProgressReporter(bytes_total=total, files_total=len(files), interval_s=interval_s)
    try:
        with progress:
            download(
                src,
                files,
                tmp,
                parallel=req.parallel,
                retry=retry,
                on_bytes=progress.add_bytes,
                on_file=progress.file_done,
            )
        try:
            flush_tree(tmp)
            os.rename(tmp, vdir)
            fsync_dir(ddir)
        except OSError as exc:
            raise CacheWriteError(exc, vdir) from exc
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    written = progress.snapshot().bytes_done  # exact, also where HTTP gave no sizes
    try:
        _write_marker(root, req, files=len(files), size=written)
    except BaseException as exc:
        # The data is in place but unmarked: take it back out rather than leave it around.
        shutil.rmtree(vdir, ignore_errors=True)
        if isinstance(exc, OSError):
            raise CacheWriteError(exc, marker_path(root, req.dataset, req.version)) from exc
        raise
    log.info(
        "%s",
        format_summary(progress.snapshot(), what=f"{req.dataset}@{req.version}", source=req.source),
        extra={"dataset": req.dataset, "version": req.version, "bytes": written},
    )
    return PrefetchResult(
        path=vdir,
        cache_hit=False,
        files=len(files),
        bytes=written,
        seconds=time.monotonic() - started,
        evictions_blocked=blocked,
    )
