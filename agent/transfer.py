"""Reading a dataset source through fsspec: open the URL, list its files, copy them in parallel.

A source is a prefix (directory) or a single object: `s3://` (s3fs; AWS_* environment and an
endpoint URL for S3-compatible stores), `gs://` (gcsfs, an optional extra), `http(s)://`, and
`file://`. Errors leave here as `SourceError` subclasses saying what was wrong with which URL,
or as `CacheWriteError` for the local side (disk full and friends).
"""

from __future__ import annotations

import base64
import binascii
import errno
import hashlib
import logging
import os
import random
import re
import threading
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import FIRST_EXCEPTION, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any, Literal, TypeVar

from agent.cache_layout import MARKER_FILE

__all__ = [
    "CacheWriteError",
    "IntegrityError",
    "RemoteFile",
    "RetryPolicy",
    "Source",
    "SourceAccessDenied",
    "SourceError",
    "SourceInvalid",
    "SourceNotFound",
    "SourceUnreachable",
    "classify_remote",
    "download",
    "list_source",
    "open_source",
]

log = logging.getLogger(__name__)

CHUNK = 8 * 1024 * 1024
# Object stores: ranged GETs need no HEAD per file and make a failed chunk cheap to repeat.
_RANGED = {"s3", "s3a", "gs", "gcs"}
_HEX_MD5 = re.compile(r"[0-9a-f]{32}")
T = TypeVar("T")


class SourceError(Exception):
    """The source cannot be read; the message names the URL and what to do."""


class SourceNotFound(SourceError):
    pass


class SourceAccessDenied(SourceError):
    pass


class SourceUnreachable(SourceError):
    pass


class SourceInvalid(SourceError):
    pass


class IntegrityError(Exception):
    """A file arrived with the wrong size or checksum, every time it was fetched."""


class Cancelled(Exception):
    """Another worker failed; this one stops between chunks."""


class CacheWriteError(Exception):
    """Writing into the cache failed (disk full, read-only, permissions)."""

    def __init__(self, exc: OSError, path: Path) -> None:
        self.disk_full = exc.errno in (errno.ENOSPC, errno.EDQUOT)
        what = "disk full" if self.disk_full else (exc.strerror or str(exc))
        super().__init__(f"{what} writing {path}")


RemoteKind = Literal["not_found", "denied", "transient", "other"]
# Transient failures of the HTTP stacks under fsspec, by class name so that neither botocore nor
# aiohttp has to be imported here (ConnectionError also matches botocore's class of that name).
_TRANSIENT_NAMES = {
    "ConnectionError",
    "HTTPClientError",
    "ClientConnectionError",
    "ClientPayloadError",
    "ServerTimeoutError",
    "FSTimeoutError",
    "IncompleteReadError",
    "ResponseStreamingError",
}


def classify_remote(exc: BaseException) -> RemoteKind:
    """How a failure talking to the source should be treated."""
    if isinstance(exc, FileNotFoundError):
        # fsspec's HTTP filesystem reports every failed HEAD/GET (403, refused…) this way
        cause = exc.__cause__
        if cause is not None and not isinstance(cause, FileNotFoundError):
            kind = classify_remote(cause)
            return kind if kind != "other" else "not_found"
        return "not_found"
    if isinstance(exc, PermissionError):
        return "denied"
    status = getattr(exc, "status", None)  # aiohttp.ClientResponseError (http sources)
    if isinstance(status, int):
        if status in (401, 403):
            return "denied"
        if status in (404, 410):
            return "not_found"
        return "transient" if status == 429 or status >= 500 else "other"
    if isinstance(exc, ConnectionError | TimeoutError):
        return "transient"
    if any(cls.__name__ in _TRANSIENT_NAMES for cls in type(exc).__mro__):
        return "transient"
    # s3fs turns S3 error codes it has no Python exception for (InternalError, SlowDown…) into EIO
    if isinstance(exc, OSError) and exc.errno == errno.EIO:
        return "transient"
    return "other"


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """Capped exponential backoff with jitter, on top of the client library's own retries."""

    attempts: int = 5
    base_s: float = 0.5
    cap_s: float = 20.0
    sleep: Callable[[float], None] = field(default=lambda s: threading.Event().wait(s))

    def delay(self, attempt: int) -> float:
        ceiling = min(self.cap_s, self.base_s * 2**attempt)
        return ceiling / 2 + random.random() * ceiling / 2  # jitter, not cryptography

    def call(self, fn: Callable[[], T], *, what: str) -> T:
        for attempt in range(self.attempts):
            try:
                return fn()
            except Exception as exc:
                if classify_remote(exc) != "transient" or attempt + 1 >= self.attempts:
                    raise
                pause = self.delay(attempt)
                log.warning(
                    "%s failed (%s: %s); retry %d/%d in %.1fs",
                    what,
                    type(exc).__name__,
                    exc,
                    attempt + 1,
                    self.attempts - 1,
                    pause,
                )
                self.sleep(pause)
        raise RuntimeError("unreachable: attempts must be >= 1")


@dataclass(frozen=True, slots=True)
class Source:
    url: str
    fs: Any  # fsspec.AbstractFileSystem; typed loosely so this module imports without fsspec
    path: str
    protocol: str

    @property
    def ranged(self) -> bool:
        return self.protocol in _RANGED


@dataclass(frozen=True, slots=True)
class RemoteFile:
    path: str  # as the filesystem names it
    rel: str  # POSIX path inside the version directory
    size: int | None  # None when an HTTP server does not say
    md5: str | None  # hex digest when the store publishes one for this object


def open_source(url: str, *, s3_endpoint_url: str | None = None) -> Source:
    import fsspec.core  # heavy; only when a prefetch really runs

    protocol = url.split("://", 1)[0].lower() if "://" in url else "file"
    options: dict[str, Any] = {"skip_instance_cache": True}
    if protocol in ("s3", "s3a"):
        endpoint = (
            s3_endpoint_url
            or os.environ.get("AWS_ENDPOINT_URL_S3")
            or os.environ.get("AWS_ENDPOINT_URL")
        )
        if endpoint:
            options["client_kwargs"] = {"endpoint_url": endpoint}
    try:
        fs, path = fsspec.core.url_to_fs(url, **options)
    except ImportError as exc:
        if protocol in ("gs", "gcs"):
            raise SourceInvalid(
                f"{url}: gs:// sources need gcsfs; install it with: pip install 'topoplace[gcs]'"
            ) from exc
        raise SourceInvalid(f"{url}: no filesystem for {protocol}:// ({exc})") from exc
    except ValueError as exc:
        raise SourceInvalid(f"{url}: unsupported source URL ({exc})") from exc
    return Source(url=url, fs=fs, path=path.rstrip("/") or path, protocol=protocol)


def _md5_of(info: dict[str, Any], protocol: str) -> str | None:
    if protocol in ("s3", "s3a"):  # single-part ETag = MD5; multipart "<hex>-N" is not
        etag = str(info.get("ETag") or info.get("etag") or "").strip('"').lower()
        return etag if _HEX_MD5.fullmatch(etag) else None
    if protocol in ("gs", "gcs") and info.get("md5Hash"):
        try:
            return base64.b64decode(info["md5Hash"]).hex()
        except (binascii.Error, ValueError):
            return None
    return None  # HTTP ETags are opaque; local files need no check


def _safe_rel(rel: str, url: str) -> str:
    parts = PurePosixPath(rel).parts
    if not parts or rel.startswith("/") or any(p in ("", ".", "..") for p in parts):
        raise SourceInvalid(f"{url}: refusing object name {rel!r} (escapes the version directory)")
    if parts == (MARKER_FILE,):
        raise SourceInvalid(f"{url}: the source holds {MARKER_FILE}, a name the cache reserves")
    return str(PurePosixPath(*parts))


def _size(info: dict[str, Any]) -> int | None:
    size = info.get("size")
    return int(size) if size is not None else None


def _list_once(src: Source) -> list[RemoteFile]:
    # HTTP has no directories: a URL ending in "/" is read as an index page of links.
    http_dir = src.protocol.startswith("http") and src.url.endswith("/")
    try:
        info = {"type": "directory"} if http_dir else src.fs.info(src.path)
    except FileNotFoundError as exc:
        if classify_remote(exc) != "not_found":
            raise
        raise SourceNotFound(f"{src.url}: no such bucket, prefix or object") from exc
    if info.get("type") != "directory":
        name = PurePosixPath(src.path.split("?", 1)[0]).name or "data"
        return [RemoteFile(src.path, name, _size(info), _md5_of(info, src.protocol))]
    base = src.path.rstrip("/") + "/"
    out: list[RemoteFile] = []
    for path, entry in sorted(src.fs.find(src.path, detail=True).items()):
        if entry.get("type") == "directory" or path.endswith("/") or not path.startswith(base):
            continue
        rel = _safe_rel(path[len(base) :], src.url)
        out.append(RemoteFile(path, rel, _size(entry), _md5_of(entry, src.protocol)))
    if not out:
        raise SourceNotFound(f"{src.url}: the prefix holds no files")
    files = {f.rel for f in out}
    clash = next(
        (f.rel for f in out if any(str(p) in files for p in PurePosixPath(f.rel).parents)), None
    )
    if clash is not None:
        raise SourceInvalid(f"{src.url}: {clash!r} sits below an object of the same name as a dir")
    return out


def list_source(src: Source, *, retry: RetryPolicy) -> list[RemoteFile]:
    """The files to fetch; raises SourceError naming the URL."""
    try:
        return retry.call(lambda: _list_once(src), what=f"listing {src.url}")
    except SourceError:
        raise
    except Exception as exc:
        raise _as_source_error(exc, src.url, retry.attempts) from exc


def _as_source_error(exc: Exception, url: str, attempts: int) -> SourceError:
    kind = classify_remote(exc)
    detail = f"{type(exc).__name__}: {exc}"
    if kind == "not_found":
        return SourceNotFound(f"{url}: no such bucket, prefix or object ({detail})")
    if kind == "denied":
        return SourceAccessDenied(f"{url}: permission denied ({detail}); check the credentials")
    if kind == "transient":
        return SourceUnreachable(f"{url}: unreachable after {attempts} attempts ({detail})")
    return SourceError(f"{url}: {detail}")


def _chunks(src: Source, f: RemoteFile, retry: RetryPolicy) -> Iterator[bytes]:
    if src.ranged and f.size is not None:
        for start in range(0, f.size, CHUNK):
            end = min(start + CHUNK, f.size)
            yield retry.call(
                lambda s=start, e=end: src.fs.cat_file(f.path, start=s, end=e),
                what=f"reading {f.path}",
            )
        return
    # Streams (local files, HTTP): one open per file; a failure restarts the file.
    with src.fs.open(f.path, "rb", block_size=0 if src.protocol.startswith("http") else None) as fh:
        while chunk := fh.read(CHUNK):
            yield chunk


@dataclass(slots=True)
class _Shared:
    """State the workers share: cancellation and whether ETags can be trusted as MD5s."""

    cancel: threading.Event = field(default_factory=threading.Event)
    etag_is_md5: bool = True  # flipped once, by any worker; a bool store needs no lock


def _write_once(
    src: Source,
    f: RemoteFile,
    target: Path,
    retry: RetryPolicy,
    shared: _Shared,
    on_bytes: Callable[[int], None],
) -> tuple[int, str]:
    digest = hashlib.md5(usedforsecurity=False)
    written = 0
    try:
        fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o644)
    except OSError as exc:
        raise CacheWriteError(exc, target) from exc
    with os.fdopen(fd, "wb") as out:
        for chunk in _chunks(src, f, retry):
            if shared.cancel.is_set():
                raise Cancelled()
            try:
                out.write(chunk)
            except OSError as exc:
                raise CacheWriteError(exc, target) from exc
            digest.update(chunk)
            written += len(chunk)
            on_bytes(len(chunk))
        try:
            out.flush()
            os.fsync(out.fileno())
        except OSError as exc:
            raise CacheWriteError(exc, target) from exc
    return written, digest.hexdigest()


def _fetch(
    src: Source,
    f: RemoteFile,
    dest: Path,
    retry: RetryPolicy,
    shared: _Shared,
    on_bytes: Callable[[int], None],
) -> None:
    target = dest / f.rel
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise CacheWriteError(exc, target.parent) from exc
    seen: str | None = None
    for attempt in range(retry.attempts):
        written = 0
        try:
            written, got = _write_once(src, f, target, retry, shared, on_bytes)
            if f.size is not None and written != f.size:
                raise IntegrityError(f"{f.path}: got {written} bytes, listed as {f.size}")
            if f.md5 and shared.etag_is_md5 and got != f.md5:
                if got == seen:  # same bytes twice: the ETag is not an MD5 (SSE-KMS, SSE-C)
                    shared.etag_is_md5 = False
                    log.warning("%s: ETag is not the content MD5; checking sizes only", f.path)
                    return
                seen = got
                raise IntegrityError(f"{f.path}: MD5 {got} differs from the ETag {f.md5}")
            return
        except (Cancelled, CacheWriteError):
            raise
        except Exception as exc:
            on_bytes(-written)
            # Ranged reads already retried each chunk; streams restart the whole file.
            again = isinstance(exc, IntegrityError) or (
                not src.ranged and classify_remote(exc) == "transient"
            )
            if not again or attempt + 1 >= retry.attempts:
                raise
            log.warning("%s: %s; fetching the file again", f.path, exc)
            retry.sleep(retry.delay(attempt))


def download(
    src: Source,
    files: Sequence[RemoteFile],
    dest: Path,
    *,
    parallel: int,
    retry: RetryPolicy,
    on_bytes: Callable[[int], None],
    on_file: Callable[[], None],
) -> None:
    """Copy every file under `dest` with `parallel` workers, largest first; stop all workers
    at the first failure and raise it (SourceError, CacheWriteError or IntegrityError)."""
    shared = _Shared()

    def one(f: RemoteFile) -> None:
        if shared.cancel.is_set():
            raise Cancelled()
        _fetch(src, f, dest, retry, shared, on_bytes)
        on_file()

    order = sorted(files, key=lambda f: (-(f.size or 0), f.rel))
    with ThreadPoolExecutor(max_workers=max(1, parallel), thread_name_prefix="prefetch") as pool:
        futures = [pool.submit(one, f) for f in order]
        try:
            wait(futures, return_when=FIRST_EXCEPTION)
            failed = next((fut for fut in futures if fut.done() and fut.exception()), None)
        except BaseException:  # SIGTERM/KeyboardInterrupt while waiting: stop the workers
            shared.cancel.set()
            for fut in futures:
                fut.cancel()
            raise
        if failed is not None:
            shared.cancel.set()
            for fut in futures:
                fut.cancel()
    if failed is None:
        return
    exc = failed.exception()
    if isinstance(exc, SourceError | CacheWriteError | IntegrityError):
        raise exc
    path = order[futures.index(failed)].path
    raise _as_source_error(exc, f"{src.protocol}://{path}", retry.attempts) from exc  # type: ignore[arg-type]
