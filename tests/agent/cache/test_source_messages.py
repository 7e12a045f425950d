"""Source errors a person can act on: an unsupported scheme is refused by name before anything
is dialled, and a storage error is one line naming the source and the missing credential, even
when the client library's message is a multi-line debug dump."""

from __future__ import annotations

from pathlib import Path

import pytest

from agent.cache.source import open_source
from agent.cache.source_errors import SourceAccessDenied, SourceInvalid, as_source_error
from tests.agent.cache.conftest import RunPrefetch

# obstore's shape: a summary line, then the Rust error chain and a debug dump.
DUMP = "\n".join(
    [
        "The operation lacked valid authentication credentials for path imagenet/: ...",
        "",
        "Debug source:",
        "Unauthenticated {",
        '    path: "imagenet/",',
        '    source: Error { retries: 0, message: "<?xml version=...>" },',
        *[f"    frame {i}" for i in range(18)],
        "}",
    ]
)
_AWS = (
    "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_PROFILE", "AWS_WEB_IDENTITY_TOKEN_FILE",
    "AWS_CONTAINER_CREDENTIALS_FULL_URI", "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI",
)  # fmt: skip


@pytest.mark.parametrize("url", ["ftp://x/y", "sftp://host/data/", "hdfs://nn/imagenet/"])
def test_an_unsupported_scheme_is_refused_by_name(url: str) -> None:
    with pytest.raises(SourceInvalid) as caught:
        open_source(url)
    scheme = url.split("://")[0]
    assert str(caught.value) == (
        f"{url}: unsupported scheme {scheme}://; a dataset source is s3://, gs://, http(s):// "
        "or file://"
    )


def test_the_command_exits_invalid_without_dialling(
    run_prefetch: RunPrefetch, tmp_path: Path
) -> None:
    done = run_prefetch(
        "--dataset", "x", "--version", "v", "--source", "ftp://x/y",
        "--cache-root", str(tmp_path),
    )  # fmt: skip
    assert done.returncode == 2
    assert "unsupported scheme ftp://" in done.stderr
    assert "Name or service not known" not in done.stderr
    assert done.stderr.count("\n") == 1, done.stderr


def test_denied_without_credentials_names_the_missing_ones(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    for name in _AWS:
        monkeypatch.delenv(name, raising=False)
    error = as_source_error(PermissionError(DUMP), "s3://ml-datasets/imagenet/", attempts=5)
    assert isinstance(error, SourceAccessDenied)
    assert str(error) == (
        "s3://ml-datasets/imagenet/: permission denied, no credentials: AWS_ACCESS_KEY_ID and "
        "AWS_SECRET_ACCESS_KEY are unset (give the dataset a sourceSecret, docs/policies.md)"
    )


def test_denied_with_credentials_is_one_line_with_the_stores_summary(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIA-test")
    error = as_source_error(PermissionError(DUMP), "s3://ml-datasets/imagenet/", attempts=5)
    text = str(error)
    assert "\n" not in text and "Debug source" not in text
    assert text.startswith("s3://ml-datasets/imagenet/: permission denied (PermissionError: The ")
    assert text.endswith("; check the credentials")
    assert len(text) < 300
