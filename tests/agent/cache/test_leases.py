"""Leases keep a version a pod uses (issue 17, part 1): eviction under pressure skips it, the
space comes back once its last user is gone, leftovers of killed writers are swept, and
prefetchers racing a reader never take a byte from under it."""

from __future__ import annotations

import os
import subprocess
import tempfile
import threading
import time
from pathlib import Path

import pytest

from agent.cache.evict import evict_version, make_room, scan_cache
from agent.cache.lease import drop, lease_and_check, leases, sweep
from agent.cache.prefetch import PrefetchRequest, prefetch
from common.cache_layout import TEMP_PREFIX, lease_dir, marker_path, version_dir
from tests.agent.cache.conftest import RunPrefetch
from tests.agent.cache.helpers import digests, tree_digests, write_tree

POD_A, POD_B = "0b8e5a52-8a3e-4c1e-9d5f-2f0c1a7b9e01", "7f3d2c10-55aa-4b7e-8f21-c0ffee000002"


def _cached(root: Path, src_root: Path, name: str, size: int, used: float) -> dict[str, bytes]:
    files = {"data.bin": os.urandom(size)}
    src = write_tree(src_root / name, files)
    prefetch(PrefetchRequest(dataset=name, version="v1", source=src.as_uri(), cache_root=root))
    os.utime(marker_path(root, name, "v1"), (used, used))
    return files


def _pressure(root: Path, *, max_bytes: int) -> list[tuple[str, str]]:
    plan = make_room(root, keep_dataset="incoming", incoming_bytes=100, max_cache_bytes=max_bytes)
    return [(v.name, v.version) for v in plan.evict]


def test_eviction_under_pressure_never_removes_a_version_in_use(tmp_path: Path) -> None:
    root = tmp_path / "cache"
    files = _cached(root, tmp_path / "src", "in-use", 1000, used=1_000)  # the oldest
    _cached(root, tmp_path / "src", "idle", 1000, used=2_000)
    src = (tmp_path / "src" / "in-use").as_uri()
    hit = prefetch(
        PrefetchRequest(dataset="in-use", version="v1", source=src, cache_root=root, pod_uid=POD_A)
    )
    assert hit.cache_hit
    os.utime(marker_path(root, "in-use", "v1"), (1_000, 1_000))  # still the LRU one

    assert _pressure(root, max_bytes=0) == [("idle", "v1")]  # everything must go, but not it

    assert tree_digests(version_dir(root, "in-use", "v1")) == digests(files)
    assert [(v.name, v.version) for v in scan_cache(root)] == [("in-use", "v1")]


def test_space_comes_back_as_soon_as_the_last_user_is_gone(tmp_path: Path) -> None:
    root = tmp_path / "cache"
    _cached(root, tmp_path / "src", "shared", 1000, used=1_000)
    for pod in (POD_A, POD_B):
        assert lease_and_check(root, "shared", "v1", pod, writer="prefetch")

    drop(root, POD_A)
    assert _pressure(root, max_bytes=0) == []  # one user left
    drop(root, POD_B)
    assert _pressure(root, max_bytes=0) == [("shared", "v1")]
    assert not version_dir(root, "shared", "v1").exists()


def test_leases_of_pods_that_are_gone_and_half_written_ones_are_swept(tmp_path: Path) -> None:
    root = tmp_path / "cache"
    for pod in (POD_A, POD_B):
        lease_and_check(root, "d", "v1", pod, writer="prefetch")
    (lease_dir(root, "d", "v1") / f"{TEMP_PREFIX}killed").write_text("{")  # SIGKILL mid-write
    listed_at = time.time() + 1  # the pod list came after all of these were written

    removed = sweep(root, live={POD_B}, listed_at=listed_at)

    assert [r.pod_uid for r in removed] == [POD_A]
    assert [lease.pod_uid for lease in leases(root)] == [POD_B]
    assert sorted(os.listdir(lease_dir(root, "d", "v1"))) == [".lock", POD_B]


def test_a_lease_newer_than_the_pod_list_is_kept(tmp_path: Path) -> None:
    """The pod list may predate a pod that has just started its prefetch: not a stale lease."""
    root = tmp_path / "cache"
    listed_at = time.time() - 5
    lease_and_check(root, "d", "v1", POD_A, writer="prefetch")
    assert sweep(root, live=set(), listed_at=listed_at) == []
    assert [lease.pod_uid for lease in leases(root)] == [POD_A]


def test_a_lease_racing_an_eviction_either_keeps_the_version_or_sees_it_gone(
    tmp_path: Path,
) -> None:
    root = tmp_path / "cache"
    outcomes = {"leased": 0, "evicted": 0}
    for i in range(150):
        vdir = version_dir(root, "race", f"v{i}")
        write_tree(vdir, {"a.bin": b"x" * 64})
        marker_path(root, "race", f"v{i}").write_text('{"bytes": 64}')
        start = threading.Barrier(2)
        result: dict[str, bool] = {}

        def evictor(version: str, start: threading.Barrier, result: dict[str, bool]) -> None:
            start.wait()
            result["evicted"] = evict_version(root, "race", version)

        def leaser(version: str, start: threading.Barrier, result: dict[str, bool]) -> None:
            start.wait()
            result["complete"] = lease_and_check(root, "race", version, POD_A, writer="test")

        threads = [
            threading.Thread(target=fn, args=(f"v{i}", start, result)) for fn in (evictor, leaser)
        ]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=10)
        # Exactly one story: the pod got a complete version that stays, or saw it gone.
        if result["complete"]:
            assert not result["evicted"] and (vdir / "a.bin").read_bytes() == b"x" * 64
            outcomes["leased"] += 1
        else:
            assert result["evicted"] and not vdir.exists()
            outcomes["evicted"] += 1
        drop(root, POD_A)
    assert sum(outcomes.values()) == 150


def test_two_prefetchers_and_a_reader_racing_never_lose_a_byte(
    run_prefetch: RunPrefetch, python: str, repo_root: Path, prefetch_env: dict[str, str],
    tmp_path: Path,
) -> None:  # fmt: skip
    root, src = tmp_path / "cache", tmp_path / "src"
    read = {f"shard-{i}.bin": os.urandom(200_000) for i in range(5)}
    write_tree(src / "read", read)
    _cached(root, src, "idle", 1_000_000, used=2_000)
    # The reader's pod: its prefetch init container downloads and leases the version.
    done = run_prefetch(
        "--dataset", "read", "--version", "v1", "--source", (src / "read").as_uri(),
        "--cache-root", str(root), "--pod-uid", POD_A,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    os.utime(marker_path(root, "read", "v1"), (1_000, 1_000))  # the LRU version on the node
    vdir = version_dir(root, "read", "v1")
    stop, problems, rounds = threading.Event(), [], [0]

    def reader() -> None:  # a training job streaming its shards, over and over
        while not stop.is_set():
            try:
                got = {n: (vdir / n).read_bytes() for n in read}
            except OSError as exc:
                problems.append(repr(exc))
                return
            if got != read:
                problems.append("content changed under the reader")
                return
            rounds[0] += 1

    for name in ("one", "two"):
        write_tree(src / name, {"big.bin": os.urandom(900_000)})
    thread = threading.Thread(target=reader)
    thread.start()

    def start(name: str, pod: str) -> subprocess.Popen[str]:
        args = ["--dataset", name, "--version", "v1", "--source", (src / name).as_uri()]
        args += ["--cache-root", str(root), "--max-cache-bytes", "2000000", "--pod-uid", pod]
        return subprocess.Popen(
            [python, "-m", "agent", "prefetch", *args],
            cwd=repo_root,
            env=prefetch_env,
            stderr=subprocess.PIPE,
            text=True,
        )

    procs = [start("one", POD_B), start("two", "pod-two")]
    outputs = [p.communicate(timeout=60)[1] for p in procs]
    stop.set()
    thread.join(timeout=10)

    assert [p.returncode for p in procs] == [0, 0], outputs
    assert problems == [] and rounds[0] > 0
    assert tree_digests(vdir) == digests(read)
    cached = {v.name for v in scan_cache(root)}
    assert {"read", "one", "two"} <= cached and "idle" not in cached


def _lease_as(uid: int, gid: int, root: Path, pod: str) -> int:
    """lease_and_check in a forked child running as uid:gid (no capabilities, the prefetch
    CLI's umask), as a container would; its exit status."""
    pid = os.fork()
    if pid == 0:  # the child: never returns into pytest
        code = 1
        try:
            os.setgroups([gid])
            os.setgid(gid)
            os.setuid(uid)
            os.umask(0o022)
            lease_and_check(root, "imagenet", "v1", pod, writer="t")
            code = 0
        finally:
            os._exit(code)
    return os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])


@pytest.mark.skipif(os.geteuid() != 0, reason="switching users needs root")
def test_a_lease_made_by_one_user_of_the_cache_group_is_writable_by_another() -> None:
    # The placement-audit agent runs as root in the cache owner's group with no capability;
    # the prefetchers run as the cache owner. Either may create a version's lease directory
    # first, and the other must still lease it (stand-ins: two plain users, one group).
    from agent.cli.prepare_cache import prepare_cache

    with tempfile.TemporaryDirectory() as scratch:  # pytest's tmp_path is 0700: not theirs
        Path(scratch).chmod(0o755)
        root = Path(scratch) / "cache"
        prepare_cache(root, 65532, 65532)
        assert _lease_as(65532, 65532, root, POD_A) == 0
        assert _lease_as(4242, 65532, root, POD_B) == 0  # another user, the same group
        assert {lease.pod_uid for lease in leases(root)} == {POD_A, POD_B}
