"""Per-process NUMA facts under the proc root (reads only): the fallback where a pod's cgroup
files are not readable.

- `pods_pids(proc_root)`: every pod's processes, by the pod directory their
  `/proc/<pid>/cgroup` names (`pod<uid>`, or the systemd `pod<uid with _>` form), one pass;
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

__all__ = ["MAX_SCANNED", "allowed", "numa_maps", "pods_pids"]

# /proc entries looked at when searching a pod's processes (pid_max is 4194304 at most, but a
# node runs far fewer): past this the search stops and says so.
MAX_SCANNED = 1 << 16
_CGROUP_MAX = 16 << 10
_STATUS_MAX = 16 << 10
_POD_IN_PATH = re.compile(
    r"pod([0-9a-f]{8}[-_][0-9a-f]{4}[-_][0-9a-f]{4}[-_][0-9a-f]{4}[-_][0-9a-f]{12})"
)


def pods_pids(proc_root: Path, *, limit: int = 4096) -> dict[str, list[int]]:
    """Pod UID (with dashes) → its processes, from one pass over `/proc/*/cgroup`;
    SysfsError when /proc is unreadable, too big, or a pod has more than `limit`."""
    try:
        entries = [e for e in os.listdir(proc_root) if e.isdigit()]
    except OSError as e:
        raise SysfsError(f"{proc_root}: unreadable ({e.strerror})") from None
    if len(entries) > MAX_SCANNED:
        raise SysfsError(f"{proc_root}: more than {MAX_SCANNED} processes to search")
    found: dict[str, list[int]] = {}
    for entry in entries:
        try:
            text = read_bounded(os.path.join(proc_root, entry, "cgroup"), _CGROUP_MAX)
        except SysfsError:
            continue  # exited since the listing, or not ours to read: not a pod's
        m = _POD_IN_PATH.search(text)
        if m is None:
            continue
        pids = found.setdefault(m[1].replace("_", "-"), [])
        pids.append(int(entry))
        if len(pids) > limit:
            raise SysfsError(f"pod {m[1]}: more than {limit} processes")
    return {uid: sorted(pids) for uid, pids in found.items()}


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
