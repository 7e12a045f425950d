"""Where a dataset comes from, read through fsspec: open the URL and list the files to fetch.

A source is a prefix (directory) or a single object: `s3://` (s3fs; AWS_* environment and an
endpoint URL for S3-compatible stores), `gs://` (gcsfs, an optional extra), `http(s)://`, and
`file://`. Object names that would escape the version directory, or clash with the cache's
own marker, are refused here. Errors leave as `SourceError` subclasses naming the URL.
"""

from __future__ import annotations

import base64
import binascii
import logging
import os
import re
from dataclasses import dataclass
from pathlib import PurePosixPath
from typing import Any

from agent.cache.s3_obstore import ObstoreS3, available
from agent.cache.source_errors import (
    RetryPolicy,
    SourceError,
    SourceInvalid,
    SourceNotFound,
    as_source_error,
    classify_remote,
)
from common.cache_layout import MARKER_FILE

__all__ = ["RemoteFile", "Source", "list_source", "open_source"]

log = logging.getLogger(__name__)

_HEX_MD5 = re.compile(r"[0-9a-f]{32}")
_SCHEMES = ("s3", "s3a", "gs", "gcs", "http", "https", "file")


@dataclass(frozen=True, slots=True)
class Source:
    url: str
    fs: Any  # fsspec.AbstractFileSystem; typed loosely so this module imports without fsspec
    path: str
    protocol: str


@dataclass(frozen=True, slots=True)
class RemoteFile:
    path: str  # as the filesystem names it
    rel: str  # POSIX path inside the version directory
    size: int | None  # None when an HTTP server does not say
    md5: str | None  # hex digest when the store publishes one for this object


def open_source(
    url: str, *, s3_endpoint_url: str | None = None, s3_engine: str = "obstore", attempts: int = 5
) -> Source:
    """`s3_engine`: "obstore" (s3_obstore.py, the default where installed) or "s3fs"."""
    protocol = url.split("://", 1)[0].lower() if "://" in url else "file"
    if protocol not in _SCHEMES:  # fsspec knows ftp://, sftp://…: refused by name, not dialled
        raise SourceInvalid(
            f"{url}: unsupported scheme {protocol}://; a dataset source is s3://, gs://, "
            "http(s):// or file://"
        )
    options: dict[str, Any] = {"skip_instance_cache": True}
    if protocol in ("s3", "s3a"):
        endpoint = (
            s3_endpoint_url
            or os.environ.get("AWS_ENDPOINT_URL_S3")
            or os.environ.get("AWS_ENDPOINT_URL")
        )
        if s3_engine == "obstore" and available():
            path = url.split("://", 1)[1]
            bucket = path.split("/", 1)[0]
            if not bucket:
                raise SourceInvalid(f"{url}: no bucket in the URL")
            fs = ObstoreS3(bucket, endpoint=endpoint, attempts=attempts)
            return Source(url=url, fs=fs, path=path.rstrip("/") or path, protocol=protocol)
        if endpoint:
            options["client_kwargs"] = {"endpoint_url": endpoint}
    import fsspec.core  # heavy (tens of ms): not on the obstore path, only for other sources

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
    # A URL ending in "/" names a prefix: list it straight away (for HTTP, which has no
    # directories, that reads an index page of links); otherwise ask what it names.
    try:
        info = {"type": "directory"} if src.url.endswith("/") else src.fs.info(src.path)
        found = src.fs.find(src.path, detail=True) if info.get("type") == "directory" else {}
    except FileNotFoundError as exc:
        if classify_remote(exc) != "not_found":
            raise
        raise SourceNotFound(f"{src.url}: no such bucket, prefix or object") from exc
    if info.get("type") != "directory":
        name = _safe_rel(PurePosixPath(src.path.split("?", 1)[0]).name or "data", src.url)
        return [RemoteFile(src.path, name, _size(info), _md5_of(info, src.protocol))]
    base = src.path.rstrip("/") + "/"
    out: list[RemoteFile] = []
    for path, entry in sorted(found.items()):
        if entry.get("type") == "directory" or path.endswith("/") or not path.startswith(base):
            continue
        rel = _safe_rel(path[len(base) :], src.url)
        out.append(RemoteFile(path, rel, _size(entry), _md5_of(entry, src.protocol)))
    if not out:
        raise SourceNotFound(f"{src.url}: the prefix holds no files")
    files = {f.rel for f in out}
    if len(files) != len(out):  # "a//b" and "a/b" are two keys but one path
        raise SourceInvalid(f"{src.url}: several object names map to the same file path")
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
        raise as_source_error(exc, src.url, retry.attempts) from exc
