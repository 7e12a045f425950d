"""NUMA memory counters as the kernel prints them: where pages are, per node (reads only).

- `node_counters(root)`: `devices/system/node/node<N>/numastat`, one `name value` line per
  counter (`numa_hit`, `numa_miss`, `numa_foreign`, `interleave_hit`, `local_node`,
  `other_node`), each a count of page allocations since boot;
- `parse_memcg_numa_stat(text, version)`: a cgroup's `memory.numa_stat`. v2 prints
  `<item> N0=<bytes> N1=<bytes>` per item (`anon`, `file`, …); v1 prints
  `<item>=<total> N0=<pages> N1=<pages>` with `hierarchical_*` rows that include the children
  (a pod's cgroup holds no process itself: its containers are children);
- `parse_numa_maps(text)`: `/proc/<pid>/numa_maps`, one mapping a line with `N<node>=<pages>`
  and `kernelpagesize_kB=<k>`.
Each parser returns bytes per NUMA node and raises SysfsError on text it cannot trust; nothing
here judges locality (agent.audit.locality does).
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from agent.sources import SysfsError, read_text

__all__ = [
    "NODE_COUNTERS",
    "NodeCounters",
    "node_counters",
    "parse_memcg_numa_stat",
    "parse_numa_maps",
]

NODE_COUNTERS = ("numa_hit", "numa_miss", "numa_foreign", "local_node", "other_node")
_NODE_DIR = re.compile(r"node(\d+)")
_PER_NODE = re.compile(r"N(\d+)=(\d+)")
# The NUMA nodes a kernel can have (CONFIG_NODES_SHIFT is at most 10): a bound on what one
# `N<i>=` field may make us index.
_MAX_NODE = 1 << 10
# memory.numa_stat is a few KiB; numa_maps grows with the mappings (vm.max_map_count, 65530 by
# default, ~150 bytes each). Reading stops at these sizes: a file cut there is reported, never
# half-counted.
MEMCG_MAX_BYTES = 64 << 10
NUMA_MAPS_MAX_BYTES = 16 << 20
# v2 items that together are the pages a cgroup holds: anonymous and page cache (shmem and
# tmpfs are counted in `file`).
_V2_ITEMS = ("anon", "file")


@dataclass(frozen=True, slots=True)
class NodeCounters:
    """One NUMA node's allocation counters (pages, monotonic since boot)."""

    numa_hit: int
    numa_miss: int
    numa_foreign: int
    local_node: int
    other_node: int


def _per_node(fields: list[str], path: str) -> dict[int, int]:
    found: dict[int, int] = {}
    for f in fields:
        m = _PER_NODE.fullmatch(f)
        if m is None or int(m[1]) >= _MAX_NODE:
            raise SysfsError(f"{path}: not a per-node count: {f[:40]!r}")
        found[int(m[1])] = int(m[2])
    return found


def parse_memcg_numa_stat(
    text: str, version: int, *, page_size: int = 4096, path: str = "memory.numa_stat"
) -> dict[int, int]:
    """Bytes per NUMA node that the cgroup (and its children) holds."""
    rows: dict[str, dict[int, int]] = {}
    for line in text.splitlines():
        fields = line.split()
        if not fields:
            continue
        if version == 2:
            rows[fields[0]] = _per_node(fields[1:], path)
        else:
            name, sep, total = fields[0].partition("=")
            if not sep or not total.isdigit():
                raise SysfsError(f"{path}: not a v1 numa_stat row: {line[:60]!r}")
            rows[name] = _per_node(fields[1:], path)
    if version == 2:
        if not all(item in rows for item in _V2_ITEMS):
            raise SysfsError(f"{path}: no {' and '.join(_V2_ITEMS)} rows (not a v2 numa_stat)")
        nodes = set().union(*(rows[item] for item in _V2_ITEMS))
        return {n: sum(rows[item].get(n, 0) for item in _V2_ITEMS) for n in sorted(nodes)}
    # Kernels before 3.x had no hierarchical rows; then the cgroup's own `total` is all there is.
    row = rows.get("hierarchical_total", rows.get("total"))
    if row is None:
        raise SysfsError(f"{path}: no total row (not a v1 numa_stat)")
    return {n: pages * page_size for n, pages in sorted(row.items())}


def parse_numa_maps(text: str, *, path: str = "numa_maps") -> dict[int, int]:
    """Bytes per NUMA node over every mapping of one process (huge pages at their size)."""
    total: dict[int, int] = {}
    for line in text.splitlines():
        fields = line.split()
        if len(fields) < 2:
            continue  # an empty mapping prints `<addr> <policy>` only
        page_kib = 4
        counts: dict[int, int] = {}
        for f in fields[2:]:
            if f.startswith("kernelpagesize_kB="):
                value = f.partition("=")[2]
                if not value.isdigit():
                    raise SysfsError(f"{path}: bad page size {f[:40]!r}")
                page_kib = int(value)
            elif (m := _PER_NODE.fullmatch(f)) is not None:
                if int(m[1]) >= _MAX_NODE:
                    raise SysfsError(f"{path}: node number out of range: {f[:40]!r}")
                counts[int(m[1])] = int(m[2])
        for node, pages in counts.items():
            total[node] = total.get(node, 0) + pages * page_kib * 1024
    return dict(sorted(total.items()))


def _counters(path: str) -> NodeCounters:
    values: dict[str, int] = {}
    for line in read_text(path).splitlines():
        name, _, value = line.partition(" ")
        if value.strip().isdigit():
            values[name] = int(value)
    missing = [c for c in NODE_COUNTERS if c not in values]
    if missing:
        raise SysfsError(f"{path}: no {', '.join(missing)}")
    return NodeCounters(**{c: values[c] for c in NODE_COUNTERS})


def node_counters(root: Path) -> tuple[Mapping[int, NodeCounters], tuple[str, ...]]:
    """Every NUMA node's `numastat` under the sysfs root, and what could not be read: a node
    whose file is missing or garbled is left out (the caller treats it as unknown, never as
    idle, and logs each problem once)."""
    node_dir = os.path.join(root, "devices/system/node")
    try:
        names = os.listdir(node_dir)
    except OSError as e:
        return {}, (f"{node_dir}: unreadable ({e.strerror})",)
    found: dict[int, NodeCounters] = {}
    problems: list[str] = []
    for name in names:
        m = _NODE_DIR.fullmatch(name)
        if m is None:
            continue
        try:
            found[int(m[1])] = _counters(os.path.join(node_dir, name, "numastat"))
        except SysfsError as e:
            problems.append(str(e))
    return dict(sorted(found.items())), tuple(sorted(problems))
