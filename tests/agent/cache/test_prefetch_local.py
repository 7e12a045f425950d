"""`topoplace-agent prefetch` from file:// and http:// sources: content, crashes, bad input."""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from agent.cache.prefetch import PrefetchRequest, prefetch, request_problem
from common.cache_layout import MARKER_FILE, TEMP_PREFIX, marker_path, version_dir
from tests.agent.cache.conftest import HTTPSource, Route, RunPrefetch
from tests.agent.cache.helpers import digests, leftovers, sample_tree, tree_digests, write_tree


def _errors(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if " ERROR " in line]


def test_file_source_arrives_byte_identical(run_prefetch: RunPrefetch, tmp_path: Path) -> None:
    files = sample_tree()
    src = write_tree(tmp_path / "src", files)
    done = run_prefetch(
        "--dataset", "coco", "--version", "2017", "--source", src.as_uri(),
        "--cache-root", str(tmp_path / "cache"), "--parallel", "4",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    vdir = version_dir(tmp_path / "cache", "coco", "2017")
    assert tree_digests(vdir) == digests(files)
    # workers may run as any user: the version, its contents and the marker are world-readable
    for path in [vdir, marker_path(tmp_path / "cache", "coco", "2017"), *vdir.rglob("*")]:
        assert path.stat().st_mode & 0o444 == 0o444, path
        if path.is_dir():
            assert path.stat().st_mode & 0o111 == 0o111, path


@pytest.mark.parametrize(
    ("dataset", "version"),
    [("../etc", "v1"), ("a/b", "v1"), ("-lead", "v1"), ("x" * 64, "v1"), ("ok", ".."),
     ("ok", "1/2"), ("ok", ""), ("ok", f"{TEMP_PREFIX}x"), ("ok", "v 1")],
)  # fmt: skip
def test_invalid_names_are_refused(dataset: str, version: str) -> None:
    problem = request_problem(dataset, version)
    assert problem is not None
    assert repr(dataset if "--dataset" in problem else version) in problem


@pytest.mark.parametrize(("dataset", "version"), [("imagenet", "2024-06"), ("a.b_c-1", "V1.0")])
def test_valid_names_pass(dataset: str, version: str) -> None:
    assert request_problem(dataset, version) is None


def test_invalid_name_exits_2_and_creates_nothing(
    run_prefetch: RunPrefetch, tmp_path: Path
) -> None:
    done = run_prefetch(
        "--dataset", "..", "--version", "v1", "--source", "file:///nonexistent",
        "--cache-root", str(tmp_path / "cache"),
    )  # fmt: skip
    assert done.returncode == 2
    assert len(_errors(done.stderr)) == 1 and "--dataset '..'" in done.stderr
    assert not (tmp_path / "cache").exists()


def test_missing_local_source_names_it(run_prefetch: RunPrefetch, tmp_path: Path) -> None:
    source = (tmp_path / "not-there").as_uri()
    done = run_prefetch(
        "--dataset", "d", "--version", "v", "--source", source, "--cache-root", str(tmp_path),
    )  # fmt: skip
    assert done.returncode == 3
    assert len(_errors(done.stderr)) == 1 and source in done.stderr
    assert "Traceback" not in done.stderr
    assert leftovers(tmp_path / "d") == [] and not (tmp_path / "d" / "v").exists()


def test_sigkill_mid_download_then_rerun_yields_a_complete_cache(
    python: str,
    repo_root: Path,
    prefetch_env: dict[str, str],
    run_prefetch: RunPrefetch,
    http_source: HTTPSource,
    tmp_path: Path,
) -> None:
    body = os.urandom(3 * 1024 * 1024)
    route = Route(body=body, stall_after=1024 * 1024)  # the server stalls mid-body
    http_source.routes["/weights.bin"] = route
    source = f"{http_source.base}/weights.bin"
    cache = tmp_path / "cache"
    args = ("--dataset", "llama", "--version", "7b", "--source", source, "--cache-root", str(cache))
    proc = subprocess.Popen(
        [python, "-m", "agent", "prefetch", *args],
        cwd=repo_root,
        env=prefetch_env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        assert route.started.wait(timeout=30), "the prefetch never started reading"
        deadline = time.monotonic() + 10
        while not leftovers(cache / "llama"):
            assert time.monotonic() < deadline
            time.sleep(0.02)
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=10)
    assert leftovers(cache / "llama"), "the kill should leave the temporary directory behind"
    assert not version_dir(cache, "llama", "7b").exists()

    route.stall_after = None  # the network is fine again
    route.release.set()
    done = run_prefetch(*args)

    assert done.returncode == 0, done.stderr
    assert "left by an interrupted prefetch" in done.stderr
    assert (version_dir(cache, "llama", "7b") / "weights.bin").read_bytes() == body
    assert marker_path(cache, "llama", "7b").is_file()
    assert leftovers(cache / "llama") == []


def test_sigterm_mid_download_removes_the_partial_download(
    python: str,
    repo_root: Path,
    prefetch_env: dict[str, str],
    http_source: HTTPSource,
    tmp_path: Path,
) -> None:
    """The kubelet stops an init container with SIGTERM: exit promptly (a worker is stuck in
    a read that will not finish), leave nothing behind, and do not wait for the stall."""
    route = Route(body=os.urandom(2 * 1024 * 1024), stall_after=4096)
    http_source.routes["/weights.bin"] = route
    cache = tmp_path / "cache"
    proc = subprocess.Popen(
        [python, "-m", "agent", "prefetch", "--dataset", "llama", "--version", "7b",
         "--source", f"{http_source.base}/weights.bin", "--cache-root", str(cache)],
        cwd=repo_root, env=prefetch_env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
    )  # fmt: skip
    try:
        assert route.started.wait(timeout=30)
        deadline = time.monotonic() + 10
        while not leftovers(cache / "llama"):
            assert time.monotonic() < deadline
            time.sleep(0.02)
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=10)  # well before the server's 30 s stall ends
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 128 + signal.SIGTERM, err
    assert b"stopped by SIGTERM" in err
    assert leftovers(cache / "llama") == []
    assert not version_dir(cache, "llama", "7b").exists()


def test_progress_is_logged_while_a_download_runs(
    http_source: HTTPSource, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    route = Route(body=os.urandom(300_000), stall_after=100_000)
    http_source.routes["/slow.bin"] = route
    request = PrefetchRequest("d", "v", f"{http_source.base}/slow.bin", cache_root=tmp_path)
    caplog.set_level(logging.INFO, logger="agent.cache.progress")
    worker = threading.Thread(
        target=prefetch, args=(request,), kwargs={"progress_interval_s": 0.05}
    )
    worker.start()
    try:
        deadline = time.monotonic() + 10
        while not any(r.getMessage().startswith("progress: ") for r in caplog.records):
            assert time.monotonic() < deadline
            time.sleep(0.02)
    finally:
        route.release.set()
        worker.join(timeout=30)
    line = next(r.getMessage() for r in caplog.records if r.getMessage().startswith("progress: "))
    assert "/ 293.0 KiB" in line and "0/1 files" in line and "ETA" in line
    assert marker_path(tmp_path, "d", "v").is_file()


def test_crash_between_rename_and_marker_is_repaired(
    run_prefetch: RunPrefetch, tmp_path: Path
) -> None:
    """A version directory without the marker is not complete: the next run replaces it."""
    files = {"a.txt": b"new a", "sub/b.txt": b"new b"}
    src = write_tree(tmp_path / "src", files)
    cache = tmp_path / "cache"
    stale = write_tree(version_dir(cache, "d", "v1"), {"a.txt": b"half", "junk": b"x"})
    done = run_prefetch(
        "--dataset", "d", "--version", "v1", "--source", src.as_uri(), "--cache-root", str(cache)
    )
    assert done.returncode == 0, done.stderr
    assert tree_digests(stale) == digests(files)
    assert (stale / MARKER_FILE).is_file()
    assert leftovers(cache / "d") == []


def test_http_permission_denied_exits_4(
    run_prefetch: RunPrefetch, http_source: HTTPSource, tmp_path: Path
) -> None:
    http_source.routes["/private.bin"] = Route(status=403)
    source = f"{http_source.base}/private.bin"
    done = run_prefetch(
        "--dataset", "d", "--version", "v", "--source", source, "--cache-root", str(tmp_path)
    )
    assert done.returncode == 4, done.stderr
    (error,) = _errors(done.stderr)
    assert source in error and "permission denied" in error


def test_unreachable_http_source_exits_5_after_retries(
    run_prefetch: RunPrefetch, refusing_endpoint: str, tmp_path: Path
) -> None:
    source = f"{refusing_endpoint}/weights.bin"
    done = run_prefetch(
        "--dataset", "d", "--version", "v", "--source", source, "--cache-root", str(tmp_path),
        "--retries", "2",
    )  # fmt: skip
    assert done.returncode == 5, done.stderr
    (error,) = _errors(done.stderr)
    assert source in error and "unreachable after 2 attempts" in error
    assert "retry 1/1" in done.stderr
    assert not version_dir(tmp_path, "d", "v").exists()


@pytest.fixture
def tiny_disk(tmp_path: Path) -> Iterator[Path]:
    """A 1 MiB tmpfs: a real ENOSPC. Needs root (mount); skipped elsewhere."""
    mnt = tmp_path / "tiny"
    mnt.mkdir()
    # libmount records mounts in /run/mount/utab: kept under tmp_path, nothing on the host.
    env = {**os.environ, "LIBMOUNT_UTAB": str(tmp_path / "utab")}
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(mnt)],
        capture_output=True,
        check=False,
        env=env,
    )
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {mounted.stderr.decode().strip()}")
    try:
        yield mnt
    finally:
        subprocess.run(["umount", str(mnt)], check=False, env=env)


def test_disk_full_exits_6_and_leaves_no_partial_version(
    run_prefetch: RunPrefetch, tiny_disk: Path, tmp_path: Path
) -> None:
    src = write_tree(tmp_path / "src", {"a.bin": os.urandom(600_000), "b.bin": os.urandom(600_000)})
    done = run_prefetch(
        "--dataset", "d", "--version", "v", "--source", src.as_uri(), "--cache-root", str(tiny_disk)
    )
    assert done.returncode == 6, done.stderr
    (error,) = _errors(done.stderr)
    assert "disk full" in error
    assert not version_dir(tiny_disk, "d", "v").exists()
    assert leftovers(tiny_disk / "d") == []


def test_help_does_not_load_fsspec(python: str, repo_root: Path) -> None:
    code = (
        "import sys, agent.cli.prefetch, agent.cache.prefetch;"
        "print(sorted({'fsspec', 's3fs', 'aiohttp'} & set(sys.modules)))"
    )
    out = subprocess.run(
        [python, "-c", code],
        cwd=repo_root,
        env={**os.environ, "PYTHONPATH": str(repo_root)},
        capture_output=True,
        text=True,
        check=True,
    )
    assert out.stdout.strip() == "[]"


def test_a_failure_becomes_the_termination_message_where_the_kubelet_mounted_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import argparse

    from agent.cli import prefetch as cli

    termination_log = tmp_path / "termination-log"  # what the kubelet mounts, empty
    termination_log.write_text("")
    monkeypatch.setattr(cli, "TERMINATION_LOG", termination_log)
    parser = argparse.ArgumentParser()
    cli.add_arguments(parser)
    source = (tmp_path / "not-there").as_uri()
    args = parser.parse_args(
        ["--dataset", "d", "--version", "v", "--source", source, "--cache-root", str(tmp_path)]
    )
    assert cli.run(args) == cli.EXIT_CODES["not_found"]
    message = termination_log.read_text()
    assert message.startswith("prefetch failed: ") and source in message
    assert message.count("\n") == 1  # one line, for `kubectl get pod` and `describe`
