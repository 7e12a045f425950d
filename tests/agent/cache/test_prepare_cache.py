"""prepare-cache hands the cache root and dataset dirs to the prefetchers' user, nothing deeper."""

from __future__ import annotations

import os
import stat
import subprocess
from pathlib import Path

import pytest

from agent.cli.prepare_cache import prepare_cache
from common.cache_layout import LEASE_DIR

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="chown to another user needs root")

UID, GID = 4321, 4322


def _owner_mode(path: Path) -> tuple[int, int, int]:
    st = path.lstat()
    return st.st_uid, st.st_gid, stat.S_IMODE(st.st_mode)


def test_root_and_dataset_dirs_change_owner_contents_do_not(tmp_path: Path) -> None:
    root = tmp_path / "var/lib/topoplace/datasets"
    version = root / "imagenet" / "2024-06"
    version.mkdir(parents=True)
    (root / "imagenet").chmod(0o700)  # as a kubelet DirectoryOrCreate might leave it
    data = version / "train.bin"
    data.write_bytes(b"x")

    changed = prepare_cache(root, UID, GID)

    assert set(changed) == {root, root / "imagenet", root / LEASE_DIR}
    assert _owner_mode(root) == (UID, GID, 0o755)
    # The agent writes leases there, maybe as root in the owner's group: group-writable, setgid.
    assert _owner_mode(root / LEASE_DIR) == (UID, GID, 0o2775)
    assert _owner_mode(root / "imagenet") == (UID, GID, 0o755)
    assert _owner_mode(version)[:2] == (0, 0)  # below a dataset dir belongs to prefetchers
    assert _owner_mode(data)[:2] == (0, 0)
    assert prepare_cache(root, UID, GID) == []  # a restart changes nothing


def test_cli_creates_a_missing_root(tmp_path: Path, python: str, repo_root: Path) -> None:
    root = tmp_path / "cache"
    done = subprocess.run(
        [python, "-m", "agent", "prepare-cache", "--cache-root", str(root), "--owner", f"{UID}"],
        env={**os.environ, "PYTHONPATH": str(repo_root)},
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert _owner_mode(root) == (UID, UID, 0o755)
    assert "ready for uid 4321:4321" in done.stderr


def test_a_bad_owner_is_a_usage_error(tmp_path: Path, python: str, repo_root: Path) -> None:
    done = subprocess.run(
        [python, "-m", "agent", "prepare-cache", "--cache-root", str(tmp_path), "--owner", "me"],
        env={**os.environ, "PYTHONPATH": str(repo_root)},
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 2
    assert "'me' is not UID[:GID]" in done.stderr


@pytest.mark.parametrize(
    ("flags", "says"),
    [
        (["--owner", "-5"], "argument --owner: '-5': a UID or GID is from 0 to 4294967294"),
        (["--owner", "1:4294967295"], "a UID or GID is from 0 to 4294967294"),
        (["--owner", "99999999999999999999"], "a UID or GID is from 0 to 4294967294"),
        (["--cache-root", "/"], "argument --cache-root: '/' must not be '/'"),
        (["--cache-root", "/etc/topoplace"], "must be outside the system directory /etc"),
        (["--cache-root", "cache"], "must be an absolute path"),
    ],
)
def test_bad_flags_are_refused_before_anything_is_created(
    tmp_path: Path, python: str, repo_root: Path, flags: list[str], says: str
) -> None:
    root = tmp_path / "cache"
    argv = ["--cache-root", str(root), *flags]
    done = subprocess.run(
        [python, "-m", "agent", "prepare-cache", *argv],
        env={**os.environ, "PYTHONPATH": str(repo_root)},
        cwd=tmp_path,
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 2
    (line,) = [ln for ln in done.stderr.splitlines() if "error:" in ln]
    assert line.startswith("topoplace-agent prepare-cache: error: argument ") and says in line
    assert "Traceback" not in done.stderr
    assert list(tmp_path.iterdir()) == []
