"""`topoplace-agent prepare-cache`: make the node's dataset cache root writable by prefetchers.

Runs once per agent pod start as the DaemonSet's only root container (capability CHOWN and
nothing else). The kubelet creates hostPath directories root-owned 0755, but prefetch init
containers run as the image's non-root user; so the cache root and each dataset directory in
it are handed to that user. Nothing below a dataset directory is touched: prefetchers made it.
The lease directory is created here too: the agent container mounts it alone read-write.
It is group-writable and setgid (2775): the agent may run as root for the placement audit
(with every capability dropped, so as a plain user to these directories), in the cache
owner's group, and its lease entries must stay writable by the prefetchers and vice versa.
"""

from __future__ import annotations

import argparse
import logging
import os
import stat
from pathlib import Path

from common.cache_layout import CACHE_OWNER, DEFAULT_CACHE_ROOT, LEASE_DIR, cache_root_problem

__all__ = ["add_arguments", "prepare_cache", "run"]

log = logging.getLogger(__name__)

_MODE = 0o755
LEASE_MODE = 0o2775  # shared by the agent and the prefetchers through the group


# chown(2) takes a 32-bit id and reads 2^32-1 as "leave unchanged": the largest real id is
# one less.
_MAX_ID = 2**32 - 2


def _owner(text: str) -> tuple[int, int]:
    """UID[:GID], checked when the flag is read: before anything is created."""
    uid, _, gid = text.partition(":")
    try:
        ids = int(uid), int(gid or uid)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not UID[:GID] (numbers)") from None
    if not all(0 <= i <= _MAX_ID for i in ids):
        raise argparse.ArgumentTypeError(f"{text!r}: a UID or GID is from 0 to {_MAX_ID}")
    return ids


def _cache_root(text: str) -> Path:
    problem = cache_root_problem(Path(text))
    if problem is not None:
        raise argparse.ArgumentTypeError(f"{text!r} {problem}")
    return Path(text)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--cache-root",
        type=_cache_root,
        default=DEFAULT_CACHE_ROOT,
        help=f"the node's dataset cache (default {DEFAULT_CACHE_ROOT}): absolute, not /, and "
        "outside the system directories, since it is handed to --owner",
    )
    parser.add_argument(
        "--owner",
        type=_owner,
        default=CACHE_OWNER,
        help="UID[:GID] the prefetch init containers run as (default {}:{})".format(*CACHE_OWNER),
    )


def prepare_cache(root: Path, uid: int, gid: int) -> list[Path]:
    """Create `root` if needed; give it and its dataset directories to uid:gid, mode 0755.
    Returns the directories that changed."""
    root.mkdir(parents=True, exist_ok=True)
    (root / LEASE_DIR).mkdir(exist_ok=True)  # the kubelet made it (DirectoryOrCreate) or we do
    changed = []
    for path in (root, *sorted(p for p in root.iterdir() if p.is_dir() and not p.is_symlink())):
        mode = LEASE_MODE if path.name == LEASE_DIR else _MODE
        st = path.lstat()
        if (st.st_uid, st.st_gid) != (uid, gid) or stat.S_IMODE(st.st_mode) != mode:
            # With CAP_CHOWN and nothing else (no CAP_FOWNER), root may change the mode of
            # what it owns only: take it, set the mode, then hand it over.
            if stat.S_IMODE(st.st_mode) != mode:
                os.chown(path, os.geteuid(), os.getegid(), follow_symlinks=False)
                path.chmod(mode)
            os.chown(path, uid, gid, follow_symlinks=False)
            changed.append(path)
    return changed


def run(args: argparse.Namespace) -> int:
    uid, gid = args.owner
    try:
        changed = prepare_cache(args.cache_root, uid, gid)
    except PermissionError as exc:
        log.error(
            "cannot hand %s to %d:%d: %s (this step needs root with CAP_CHOWN)",
            args.cache_root,
            uid,
            gid,
            exc,
        )
        return 1
    except OSError as exc:
        log.error("cannot prepare dataset cache %s: %s", args.cache_root, exc)
        return 1
    log.info(
        "dataset cache %s ready for uid %d:%d (%d directories changed)",
        args.cache_root,
        uid,
        gid,
        len(changed),
    )
    return 0
