"""Pure rules under prefetch: retry policy, error classes, progress text, size parsing."""

from __future__ import annotations

import errno
import re

import aiohttp
import botocore.exceptions
import pytest

from agent.cache.progress import ProgressSnapshot, format_progress, format_summary
from agent.cache.source import open_source
from agent.cache.source_errors import RetryPolicy, SourceInvalid, classify_remote
from agent.cli.prefetch import parse_size
from common.backoff import BackoffPolicy


class Flaky:
    def __init__(self, failures: list[Exception]) -> None:
        self.failures = failures
        self.calls = 0

    def __call__(self) -> str:
        self.calls += 1
        if self.failures:
            raise self.failures.pop(0)
        return "ok"


def test_transient_errors_are_retried_with_capped_growing_pauses() -> None:
    pauses: list[float] = []
    backoff = BackoffPolicy(initial=1.0, cap=3.0, floor=0.1)
    policy = RetryPolicy(attempts=5, backoff=backoff, sleep=pauses.append)
    fn = Flaky(
        [ConnectionResetError(), TimeoutError(), ConnectionRefusedError(), OSError(errno.EIO, "x")]
    )
    assert policy.call(fn, what="t") == "ok"
    assert fn.calls == 5
    assert len(pauses) == 4
    # pause n lies in [floor, ceiling] with ceiling = min(cap, initial * 2**n)
    for n, pause in enumerate(pauses):
        assert 0.1 <= pause <= min(3.0, 2.0**n)


def test_permanent_errors_are_not_retried_and_attempts_are_bounded() -> None:
    pauses: list[float] = []
    policy = RetryPolicy(attempts=3, sleep=pauses.append)
    with pytest.raises(PermissionError):
        policy.call(Flaky([PermissionError("denied")]), what="t")
    assert pauses == []
    fn = Flaky([ConnectionResetError()] * 5)
    with pytest.raises(ConnectionResetError):
        policy.call(fn, what="t")
    assert fn.calls == 3


def _http_error(status: int) -> aiohttp.ClientResponseError:
    return aiohttp.ClientResponseError(request_info=None, history=(), status=status)  # type: ignore[arg-type]


def _wrapped(cause: BaseException) -> FileNotFoundError:
    err = FileNotFoundError("http://x/y")
    err.__cause__ = cause
    return err


@pytest.mark.parametrize(
    ("exc", "kind"),
    [
        (FileNotFoundError("k"), "not_found"),
        (PermissionError("k"), "denied"),
        (botocore.exceptions.EndpointConnectionError(endpoint_url="http://h"), "transient"),
        (botocore.exceptions.ReadTimeoutError(endpoint_url="http://h"), "transient"),
        (aiohttp.ClientConnectorError.__new__(aiohttp.ClientConnectorError), "transient"),
        (_http_error(403), "denied"),
        (_http_error(503), "transient"),
        (_wrapped(_http_error(403)), "denied"),
        (_wrapped(_http_error(404)), "not_found"),
        (_wrapped(ConnectionRefusedError()), "transient"),
        (OSError(errno.EIO, "InternalError"), "transient"),
        (ValueError("bad"), "other"),
    ],
)
def test_classify_remote(exc: BaseException, kind: str) -> None:
    assert classify_remote(exc) == kind


def test_progress_line_has_bytes_files_rate_and_eta() -> None:
    snap = ProgressSnapshot(
        bytes_done=50 * 2**20, bytes_total=200 * 2**20, files_done=3, files_total=12, elapsed_s=10
    )
    assert format_progress(snap) == ("50.0 MiB / 200.0 MiB (25.0%), 3/12 files, 5.0 MiB/s, ETA 30s")
    assert format_summary(snap, what="d@v", source="s3://b/p/") == (
        "prefetched d@v: 3 files, 50.0 MiB in 10.0s (5.0 MiB/s) from s3://b/p/"
    )


def test_progress_before_any_byte_has_unknown_eta() -> None:
    snap = ProgressSnapshot(bytes_done=0, bytes_total=10, files_done=0, files_total=1, elapsed_s=0)
    assert format_progress(snap).endswith("ETA ?")


@pytest.mark.parametrize(
    ("text", "value"),
    [("1048576", 1048576), ("10G", 10 * 1000**3), ("10Gi", 10 * 2**30), ("500mi", 500 * 2**20)],
)
def test_parse_size(text: str, value: int) -> None:
    assert parse_size(text) == value


def test_gs_source_without_gcsfs_says_what_to_install() -> None:
    try:
        import gcsfs  # noqa: F401
    except ImportError:
        pass
    else:
        pytest.skip("gcsfs is installed here")
    with pytest.raises(SourceInvalid, match=re.escape("pip install 'topoplace[gcs]'")):
        open_source("gs://bucket/imagenet/")


def test_unknown_scheme_is_refused_naming_the_url() -> None:
    with pytest.raises(SourceInvalid, match=re.escape("nosuch://bucket/x")):
        open_source("nosuch://bucket/x")
