"""The on-node dataset cache layout (contract): `<root>/<name>/<version>/` + completion marker.

Owned here so the prefetcher (writer), the datasets discovery source and the webhook's mounts
(readers) agree on every path and file name.
"""

from __future__ import annotations

import posixpath
from pathlib import Path

__all__ = [
    "CACHE_OWNER",
    "DEFAULT_CACHE_ROOT",
    "LEASE_DIR",
    "LOCK_FILE",
    "MARKER_FILE",
    "PREFETCH_CONTAINER_PREFIX",
    "SYSTEM_DIRS",
    "TEMP_PREFIX",
    "cache_root_problem",
    "dataset_dir",
    "lease_dir",
    "lock_path",
    "marker_path",
    "version_dir",
]

DEFAULT_CACHE_ROOT = Path("/var/lib/topoplace/datasets")
# uid:gid that owns the cache root and writes it: the image's non-root user. The agent's
# prepare-cache step hands the root to it; the webhook runs prefetch init containers as it.
CACHE_OWNER = (65532, 65532)
# JSON: {"source", "files", "bytes", "completed_at"}; its presence alone means "complete".
MARKER_FILE = ".topoplace-complete"
# One writer per dataset per node: an flock on this file inside <root>/<name>/.
LOCK_FILE = ".topoplace-lock"
# Temporary download directories are siblings of the version directory with this prefix.
TEMP_PREFIX = ".topoplace-tmp-"
# Leases (who uses a version): <root>/.topoplace-leases/<name>/<version>/<pod-uid>, one file per
# pod and version, plus `.lock` there (the version's guard: a lease is written and the marker
# checked, or leases checked and the version evicted, under it). A version with a lease is
# never evicted. Outside the version directories so workers' read-only mounts never see them,
# and in one subtree so the agent can be given write access to leases and nothing else.
LEASE_DIR = ".topoplace-leases"
# The prefetch init containers the webhook adds are named `<this>-<dataset slug>-<hash>`; the
# agent finds their outcomes in the pod's status by it.
PREFETCH_CONTAINER_PREFIX = "topoplace-prefetch"


def dataset_dir(root: Path, name: str) -> Path:
    return root / name


def version_dir(root: Path, name: str, version: str) -> Path:
    return root / name / version


def marker_path(root: Path, name: str, version: str) -> Path:
    return version_dir(root, name, version) / MARKER_FILE


def lease_dir(root: Path, name: str, version: str) -> Path:
    return root / LEASE_DIR / name / version


def lock_path(root: Path, name: str) -> Path:
    return dataset_dir(root, name) / LOCK_FILE


# Host directories a cache root must not be, lie in or hold: the prefetch init containers
# mount the root read-write, so a root of `/` or `/etc` would hand them the host. The
# kubelet's and the runtimes' state count too; so does any /lib* (checked by prefix).
SYSTEM_DIRS = (
    "/bin",
    "/boot",
    "/dev",
    "/etc",
    "/proc",
    "/root",
    "/run",
    "/sbin",
    "/sys",
    "/usr",
    "/var/lib/containerd",
    "/var/lib/docker",
    "/var/lib/kubelet",
    "/var/log",
    "/var/run",
)


def cache_root_problem(root: Path) -> str | None:
    """None when `root` may be the dataset cache root on the nodes, else why not."""
    if not root.is_absolute():
        return "must be an absolute path (it becomes a hostPath on the nodes)"
    if ".." in str(root).split("/"):
        return "must not contain '..'"
    path = posixpath.normpath(str(root))
    if path in ("/", "//"):
        return "must not be '/': the prefetch containers mount it read-write"
    why = "the prefetch containers mount it read-write"
    if path.split("/")[1].startswith("lib"):
        return f"must be outside the system directories /lib* ({why})"
    for system in SYSTEM_DIRS:
        if path == system or path.startswith(system + "/"):
            return f"must be outside the system directory {system} ({why})"
        if system.startswith(path + "/"):
            return f"must not hold the system directory {system} ({why})"
    return None
