"""CPU source: online CPUs, packages (sockets), physical cores and NUMA nodes with CPU lists
and memory.

Reads `devices/system/cpu/online`, `cpuN/topology/{physical_package_id,thread_siblings_list}`
and `devices/system/node/nodeN/{cpulist,meminfo}`. A kernel built without NUMA has no node
directory: then every online CPU is on node 0 (what `numa_node` -1 means on such a machine),
and the node's memory is unknown.
"""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from agent.sources import SysfsError, read_int, read_text

__all__ = ["CpuInfo", "discover", "format_cpulist", "numa_distances", "parse_cpulist"]

log = logging.getLogger(__name__)

_CPU_DIR = re.compile(r"cpu(\d+)")
_NODE_DIR = re.compile(r"node(\d+)")
# Upper bound on a CPU number we accept from a list, so "0-4000000000" cannot eat memory.
_MAX_CPU = 1 << 16
# NUMA node numbers at or past the kernel's largest MAX_NUMNODES (NODES_SHIFT 10) are not a
# kernel's: skipped, so a damaged tree cannot make every later step count millions of nodes.
_MAX_NODE = 1 << 10


@dataclass(frozen=True, slots=True)
class CpuInfo:
    online: frozenset[int]
    packages: Mapping[int, frozenset[int]]  # physical_package_id -> online CPUs
    cores: tuple[frozenset[int], ...]  # one entry per physical core: its hardware threads
    numa_nodes: Mapping[int, frozenset[int]]  # node id -> CPUs (nodes without CPUs included)
    numa_from_sysfs: bool  # False when the kernel shows no node directory
    # node id -> MemTotal in KiB; a node whose meminfo is missing or garbled is absent
    numa_memory_kib: Mapping[int, int] = field(default_factory=dict)


def parse_cpulist(text: str) -> frozenset[int]:
    """`0-55,112-167` → the set of CPU numbers; ValueError on anything else."""
    cpus: set[int] = set()
    for part in text.strip().split(","):
        if not part:
            continue
        first, sep, last = part.partition("-")
        lo = int(first)
        hi = int(last) if sep else lo
        if lo < 0 or hi < lo or hi >= _MAX_CPU:
            raise ValueError(f"bad CPU range {part!r}")
        cpus.update(range(lo, hi + 1))
    return frozenset(cpus)


def format_cpulist(cpus: Iterable[int]) -> str:
    """The kernel's compact form: {0,1,2,5} → `0-2,5`."""
    ordered = sorted(cpus)
    parts: list[str] = []
    i = 0
    while i < len(ordered):
        j = i
        while j + 1 < len(ordered) and ordered[j + 1] == ordered[j] + 1:
            j += 1
        parts.append(str(ordered[i]) if i == j else f"{ordered[i]}-{ordered[j]}")
        i = j + 1
    return ",".join(parts)


def _read_cpulist(path: str, *, allow_empty: bool = False) -> frozenset[int]:
    text = read_text(path, allow_empty=allow_empty)
    try:
        return parse_cpulist(text)
    except ValueError:
        raise SysfsError(f"{path}: not a CPU list: {text[:40]!r}") from None


def _listdir(path: str) -> list[str]:
    try:
        return os.listdir(path)
    except OSError:
        return []


def _online(cpu_dir: str) -> frozenset[int]:
    try:
        return _read_cpulist(os.path.join(cpu_dir, "online"))
    except SysfsError as e:
        log.info("no usable online CPU list, counting cpuN directories: %s", e)
    return frozenset(int(m[1]) for n in _listdir(cpu_dir) if (m := _CPU_DIR.fullmatch(n)))


def _node_memory(path: str, node: int) -> int:
    """MemTotal in KiB from the line `Node <node> MemTotal:  1031968572 kB`."""
    text = read_text(path)
    for line in text.splitlines():
        fields = line.split()
        if fields[:3] == ["Node", str(node), "MemTotal:"]:
            if len(fields) == 5 and fields[4] == "kB" and fields[3].isdigit():
                return int(fields[3])
            raise SysfsError(f"{path}: bad MemTotal line {line.strip()[:60]!r}")
    raise SysfsError(f"{path}: no 'Node {node} MemTotal:' line")


def _numa_nodes(node_dir: str) -> tuple[dict[int, frozenset[int]], dict[int, int]]:
    nodes: dict[int, frozenset[int]] = {}
    memory: dict[int, int] = {}
    beyond = 0
    for name in _listdir(node_dir):
        m = _NODE_DIR.fullmatch(name)
        if not m:
            continue
        node = int(m[1])
        if node >= _MAX_NODE:
            beyond += 1
            continue
        path = os.path.join(node_dir, name, "cpulist")
        try:
            # A memory-only node (CXL, HBM) prints an empty list: a node without CPUs.
            nodes[node] = _read_cpulist(path, allow_empty=True)
        except SysfsError as e:
            log.warning("skipping NUMA node %s: %s", name, e)
            continue
        try:
            memory[node] = _node_memory(os.path.join(node_dir, name, "meminfo"), node)
        except SysfsError as e:
            log.warning("NUMA node %s: memory unknown: %s", name, e)
    if beyond:
        log.warning("skipping %d NUMA node directories numbered %d or more", beyond, _MAX_NODE)
    return nodes, memory


def discover(root: Path) -> CpuInfo:
    cpu_dir = os.path.join(root, "devices/system/cpu")
    online = _online(cpu_dir)
    packages: dict[int, set[int]] = {}
    cores: list[frozenset[int]] = []
    seen: set[int] = set()
    for cpu in sorted(online):
        topo = os.path.join(cpu_dir, f"cpu{cpu}", "topology")
        try:
            package = read_int(os.path.join(topo, "physical_package_id"))
        except SysfsError as e:
            log.warning("skipping CPU %d: %s", cpu, e)
            continue
        packages.setdefault(package, set()).add(cpu)
        if cpu in seen:
            continue  # its core was read with an earlier sibling: one read per core
        try:
            siblings = _read_cpulist(os.path.join(topo, "thread_siblings_list")) & online
        except SysfsError as e:
            log.warning("CPU %d: no thread siblings, counting it as its own core: %s", cpu, e)
            siblings = frozenset()
        core = siblings | {cpu}
        seen |= core
        cores.append(frozenset(core))
    node_dir = os.path.join(root, "devices/system/node")
    nodes, memory = _numa_nodes(node_dir) if os.path.isdir(node_dir) else ({}, {})
    from_sysfs = bool(nodes)
    if not nodes and online:
        nodes = {0: online}
    return CpuInfo(
        online=online,
        packages={p: frozenset(c) for p, c in sorted(packages.items())},
        cores=tuple(cores),
        numa_nodes={n: c & online for n, c in sorted(nodes.items())},
        numa_from_sysfs=from_sysfs,
        numa_memory_kib=dict(sorted(memory.items())),
    )


def numa_distances(root: Path) -> dict[int, dict[int, int]]:
    """`nodeN/distance` (the firmware's SLIT row, in node order) as {N: {M: distance}}.

    A node whose row is missing or does not match the node list is left out: costs are
    optional in what the agent publishes, so a partial table is better than none.
    """
    node_dir = os.path.join(root, "devices/system/node")
    nodes = sorted(int(m[1]) for m in map(_NODE_DIR.fullmatch, _listdir(node_dir)) if m)
    table: dict[int, dict[int, int]] = {}
    for node in nodes:
        try:
            text = read_text(os.path.join(node_dir, f"node{node}", "distance"))
            row = [int(v) for v in text.split()]
        except (SysfsError, ValueError):
            continue
        if len(row) == len(nodes):
            table[node] = dict(zip(nodes, row, strict=True))
    return table
