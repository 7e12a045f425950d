"""`topoplace-agent prefetch`: download a dataset version into the node cache (init container).

Only argparse and the standard library load for `--help`; fsspec and friends load in `run`.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import re
import signal
from pathlib import Path
from types import FrameType

from common.cache_layout import DEFAULT_CACHE_ROOT

__all__ = ["EXIT_CODES", "add_arguments", "parse_size", "run"]

log = logging.getLogger(__name__)

# Documented in --help; the init container's exit code tells an operator what to look at.
EXIT_CODES = {
    "invalid": 2,  # bad --dataset/--version/--source
    "not_found": 3,  # no such bucket, prefix or object
    "denied": 4,  # permission denied by the source
    "unreachable": 5,  # network failure after retries
    "disk_full": 6,  # ENOSPC/EDQUOT in the cache
    "integrity": 7,  # size or checksum mismatch on every attempt
    "cache_write": 8,  # any other error writing the cache
}
_SIZE = re.compile(r"(\d+)\s*([KMGTP]i?)?B?", re.IGNORECASE)
_POWERS = {"k": 1, "m": 2, "g": 3, "t": 4, "p": 5}


def parse_size(text: str) -> int:
    """Bytes from "1048576", "10G" (powers of 1000) or "10Gi" (powers of 1024)."""
    m = _SIZE.fullmatch(text.strip())
    if not m:
        raise argparse.ArgumentTypeError(f"{text!r} is not a size (e.g. 500Gi, 2T, 1048576)")
    number, unit = int(m.group(1)), m.group(2)
    if not unit:
        return number
    base = 1024 if unit.lower().endswith("i") else 1000
    return number * base ** _POWERS[unit[0].lower()]


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text!r} must be a positive integer")
    return value


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.epilog = "exit codes: 0 done or cache hit, " + ", ".join(
        f"{code} {what.replace('_', ' ')}" for what, code in EXIT_CODES.items()
    )
    parser.add_argument("--dataset", required=True, help="dataset name (a label name part)")
    parser.add_argument("--version", required=True, help="dataset version (a label value)")
    parser.add_argument(
        "--source", required=True, help="s3://, gs://, http(s):// or file:// prefix or object"
    )
    parser.add_argument(
        "--cache-root",
        type=Path,
        default=DEFAULT_CACHE_ROOT,
        help=f"node dataset cache (default {DEFAULT_CACHE_ROOT})",
    )
    parser.add_argument(
        "--parallel", type=_positive, default=64, help="files in flight (default 64)"
    )
    parser.add_argument(
        "--max-cache-bytes",
        type=parse_size,
        default=None,
        help="evict least recently used versions of other datasets to stay under this",
    )
    parser.add_argument(
        "--s3-endpoint-url",
        default=None,
        help="S3-compatible endpoint (default: $AWS_ENDPOINT_URL_S3, then $AWS_ENDPOINT_URL)",
    )
    parser.add_argument(
        "--s3-engine",
        choices=("obstore", "s3fs"),
        default="obstore",
        help="transfer engine for s3:// sources (default %(default)s: measured faster; s3fs "
        "is the fallback, also used when obstore is not installed)",
    )
    parser.add_argument(
        "--pod-uid",
        default=os.environ.get("TOPOPLACE_POD_UID") or None,
        metavar="UID",
        help="UID of the pod served: leases the version so eviction keeps it while the pod "
        "exists (default: $TOPOPLACE_POD_UID, set by the webhook from the downward API)",
    )
    parser.add_argument(
        "--retries",
        type=_positive,
        default=5,
        help="attempts per request on transient errors, with capped backoff (default 5)",
    )


class _Terminated(SystemExit):
    pass


def _terminate(signum: int, frame: FrameType | None) -> None:
    # The kubelet stops an init container with SIGTERM: unwind so that the temporary
    # directory is removed and the lock released, instead of dying on the spot.
    raise _Terminated(128 + signum)


def run(args: argparse.Namespace) -> int:
    from agent.cache.prefetch import InvalidRequest, PrefetchRequest, prefetch
    from agent.cache.source_errors import (
        CacheWriteError,
        IntegrityError,
        RetryPolicy,
        SourceAccessDenied,
        SourceError,
        SourceInvalid,
        SourceNotFound,
        SourceUnreachable,
    )

    signal.signal(signal.SIGTERM, _terminate)
    os.umask(0o022)  # the cache is read by workers running as any user: files 0644, dirs 0755
    if logging.getLogger().level > logging.DEBUG:
        # "Found credentials in environment variables." and the like: noise in pod logs
        for name in ("aiobotocore", "botocore", "s3fs", "fsspec", "obstore"):
            logging.getLogger(name).setLevel(logging.WARNING)
    request = PrefetchRequest(
        dataset=args.dataset,
        version=args.version,
        source=args.source,
        cache_root=args.cache_root,
        parallel=args.parallel,
        max_cache_bytes=args.max_cache_bytes,
        s3_endpoint_url=args.s3_endpoint_url,
        pod_uid=args.pod_uid,
        s3_engine=args.s3_engine,
    )
    errors: list[tuple[type[Exception], str]] = [
        (InvalidRequest, "invalid"),
        (SourceInvalid, "invalid"),
        (SourceNotFound, "not_found"),
        (SourceAccessDenied, "denied"),
        (SourceUnreachable, "unreachable"),
        (IntegrityError, "integrity"),
    ]
    try:
        result = prefetch(request, retry=RetryPolicy(attempts=args.retries))
    except _Terminated as exc:
        log.error("prefetch stopped by SIGTERM; no partial download left behind")
        for handler in logging.getLogger().handlers:
            handler.flush()
        # Worker threads may sit in a network read; the interpreter would join them at exit.
        os._exit(int(exc.code or 143))
    except CacheWriteError as exc:
        _failed(str(exc))
        return EXIT_CODES["disk_full" if exc.disk_full else "cache_write"]
    except (InvalidRequest, SourceError, IntegrityError) as exc:
        kind = next((k for cls, k in errors if isinstance(exc, cls)), None)
        _failed(str(exc))
        return EXIT_CODES[kind] if kind else 1
    except OSError as exc:
        _failed(f"{exc} (cache root {os.fspath(args.cache_root)})")
        return 1
    _terminated_with(result.report().line())
    return 0


# Where the kubelet reads a container's termination message (the Pod default). Only written
# when the kubelet has put the file there: never created elsewhere.
TERMINATION_LOG = Path("/dev/termination-log")


def _failed(reason: str) -> None:
    """Log the one-line reason, and give it to `kubectl describe` as the termination message."""
    message = f"prefetch failed: {reason}"
    log.error("%s", message)
    _terminated_with(message)


def _terminated_with(message: str) -> None:
    """The termination message: a failure's reason, or a success's report, which the node's
    agent counts (agent/sync/pod_events/prefetches.py). One line, within the kubelet's 4096
    bytes."""
    if TERMINATION_LOG.is_file():
        with contextlib.suppress(OSError):
            TERMINATION_LOG.write_text(message.splitlines()[0][:4096] + "\n")
