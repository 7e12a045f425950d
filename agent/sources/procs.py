"""Per-process NUMA facts under the proc root (reads only): the fallback where a pod's cgroup
files are not readable.

- `pods_pids(proc_root)`: every pod's processes, one pass: by the pod directory their
  `/proc/<pid>/cgroup` names (`pod<uid>`, or the systemd `pod<uid with _>` form); where the
  cgroup names no pod (a kubelet with `cgroupsPerQOS: false` asks the runtime for no pod
  cgroup), by the pod's own volumes in the process's `/proc/<pid>/mountinfo` (below);
- `numa_maps(proc_root, pid)`: bytes per NUMA node of one process (agent.sources.numa_stat);
- `allowed(proc_root, pid)`: `Cpus_allowed_list` and `Mems_allowed_list` from `status`.
A process that exits while it is read raises SysfsError with `missing=True`: its numbers would
be partial. Reading another user's `numa_maps` needs ptrace access (CAP_SYS_PTRACE), so where
the agent lacks it this fallback reports the files unreadable.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from agent.sources import SysfsError, read_bounded
from agent.sources.cpu import parse_cpulist
from agent.sources.numa_stat import NUMA_MAPS_MAX_BYTES, parse_numa_maps

__all__ = ["MAX_SCANNED", "MOUNTINFO_BUDGET", "allowed", "numa_maps", "pod_of_mounts", "pods_pids"]

# /proc entries looked at when searching a pod's processes (pid_max is 4194304 at most, but a
# node runs far fewer): past this the search stops and says so.
MAX_SCANNED = 1 << 16
_CGROUP_MAX = 16 << 10
_STATUS_MAX = 16 << 10
_POD_IN_PATH = re.compile(
    r"pod([0-9a-f]{8}[-_][0-9a-f]{4}[-_][0-9a-f]{4}[-_][0-9a-f]{4}[-_][0-9a-f]{12})"
)
# The kubelet keeps each pod's files under `<root-dir>/pods/<uid>/` (etc-hosts, the containers'
# termination logs, volumes) and the runtime bind-mounts them into every container: mountinfo's
# 4th field (the mount's root within its file system) then names that path.
_POD_FILES = re.compile(r"/pods/([0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12})/")
# A container sees tens of mounts (a few KiB); a mount table past this is the host's or the
# kubelet's (every pod's volumes), never one container's: skipped unread.
_MOUNTINFO_MAX = 64 << 10
# mountinfo bytes one search reads at most over all processes whose cgroup names no pod.
MOUNTINFO_BUDGET = 32 << 20


def pods_pids(proc_root: Path, *, limit: int = 4096) -> dict[str, list[int]]:
    """Pod UID (with dashes) → its processes, from one pass over `/proc/*/cgroup` (and the
    `mountinfo` of processes whose cgroup names no pod); SysfsError when /proc is
    unreadable, too big, or a pod has more than `limit`."""
    try:
        entries = [e for e in os.listdir(proc_root) if e.isdigit()]
    except OSError as e:
        raise SysfsError(f"{proc_root}: unreadable ({e.strerror})") from None
    if len(entries) > MAX_SCANNED:
        raise SysfsError(f"{proc_root}: more than {MAX_SCANNED} processes to search")
    found: dict[str, list[int]] = {}
    budget = MOUNTINFO_BUDGET
    for entry in entries:
        base = os.path.join(proc_root, entry)
        try:
            text = read_bounded(os.path.join(base, "cgroup"), _CGROUP_MAX)
        except SysfsError:
            continue  # exited since the listing, or not ours to read: not a pod's
        m = _POD_IN_PATH.search(text)
        uid = m[1].replace("_", "-") if m is not None else None
        if uid is None:
            try:
                mounts = read_bounded(os.path.join(base, "mountinfo"), _MOUNTINFO_MAX)
            except SysfsError:
                continue  # exited, unreadable, or a host-sized mount table
            budget -= len(mounts)
            if budget < 0:
                raise SysfsError(
                    f"{proc_root}: more than {MOUNTINFO_BUDGET >> 20} MiB of mountinfo to "
                    "search for pods without a cgroup"
                )
            uid = pod_of_mounts(mounts)
            if uid is None:
                continue
        pids = found.setdefault(uid, [])
        pids.append(int(entry))
        if len(pids) > limit:
            raise SysfsError(f"pod {uid}: more than {limit} processes")
    return {uid: sorted(pids) for uid, pids in found.items()}


def pod_of_mounts(mountinfo: str) -> str | None:
    """The pod UID whose kubelet files this mount table has mounted, when exactly one pod's
    are (a process of that pod's container); None for none or several (the host, the
    kubelet, a node plugin that mounts the kubelet's directory). A mount whose mount point
    is itself under `pods/<uid>/` is the host's view of a volume, not a container's, and
    does not count."""
    uids: set[str] = set()
    for line in mountinfo.splitlines():
        fields = line.split(" ", 5)
        if len(fields) < 5 or _POD_FILES.search(fields[4] + "/"):
            continue
        if (m := _POD_FILES.search(fields[3] + "/")) is not None:
            uids.add(m[1])
    return uids.pop() if len(uids) == 1 else None


def numa_maps(
    proc_root: Path, pid: int, *, limit: int = NUMA_MAPS_MAX_BYTES
) -> tuple[dict[int, int], int]:
    """(bytes per NUMA node, bytes of numa_maps read); SysfsError past `limit` bytes."""
    path = os.path.join(proc_root, str(pid), "numa_maps")
    text = read_bounded(path, min(limit, NUMA_MAPS_MAX_BYTES))
    if not text.strip():
        # A live process always has mappings: empty means it exited (or is a zombie).
        raise SysfsError(f"{path}: empty (the process exited)", missing=True)
    return parse_numa_maps(text, path=path), len(text)


def allowed(proc_root: Path, pid: int) -> tuple[frozenset[int], frozenset[int]]:
    """(CPUs, memory nodes) the process may use."""
    path = os.path.join(proc_root, str(pid), "status")
    text = read_bounded(path, _STATUS_MAX)
    fields = dict(line.partition(":")[::2] for line in text.splitlines())
    sets: list[frozenset[int]] = []
    for key in ("Cpus_allowed_list", "Mems_allowed_list"):
        if key not in fields:
            raise SysfsError(f"{path}: no {key}", missing=not text)
        try:
            sets.append(parse_cpulist(fields[key]))
        except ValueError:
            raise SysfsError(f"{path}: {key} is not a list: {fields[key][:40]!r}") from None
    return sets[0], sets[1]
