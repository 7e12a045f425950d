"""The machine as a kubelet's cAdvisor reads it, derived from the sysfs tree that
`topoplace-agent discover` reads.

cAdvisor (and through it the CPU, memory and topology managers) needs more than our fixtures
hold: `node*/cpu*` links, per-node `meminfo`, `distance` and `hugepages/`, `/proc/cpuinfo` and
`/proc/meminfo`. A missing one fails the kubelet's whole topology, so they are written here
from what the tree says (CPUs, packages, cores, NUMA nodes) and the machine's memory. The
result is bind-mounted over `/sys/devices/system` and the two /proc files in the kubelet's
own mount namespace; nothing on the host changes.
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path

from agent.sources.cpu import discover as read_cpus
from agent.sources.cpu import parse_cpulist

__all__ = ["MachineView", "NodeSetupError", "write_view"]


class NodeSetupError(ValueError):
    """The sysfs tree cannot describe a machine to a kubelet; the message names the file."""


@dataclass(frozen=True)
class MachineView:
    system: Path  # bind-mounted over /sys/devices/system
    cpuinfo: Path  # over /proc/cpuinfo
    meminfo: Path  # over /proc/meminfo
    cpus: int
    numa_nodes: tuple[int, ...]
    memory_kib: int  # the machine's: the tree's per-node meminfo, or what was given


def _read(path: Path) -> str:
    try:
        return path.read_text()
    except FileNotFoundError:
        raise NodeSetupError(f"{path}: missing (a kubelet needs the CPU topology)") from None


@dataclass(frozen=True)
class _Cpu:
    id: int
    package: int
    core: int


def _cpus(system: Path) -> list[_Cpu]:
    cpus = []
    online = system / "cpu" / "online"
    try:
        listed = sorted(parse_cpulist(_read(online)))
    except ValueError as exc:
        raise NodeSetupError(f"{online}: {exc}") from None
    for cpu in listed:
        topo = system / "cpu" / f"cpu{cpu}" / "topology"
        package = int(_read(topo / "physical_package_id"))
        cpus.append(_Cpu(cpu, package, int(_read(topo / "core_id"))))
    if not cpus:
        raise NodeSetupError(f"{system / 'cpu' / 'online'}: lists no CPU")
    return cpus


def _distance(a: int, b: int, package: dict[int, int]) -> int:
    if a == b:
        return 10
    return 12 if package.get(a) == package.get(b) else 21


def write_view(sysfs: Path, memory_kib: int, out: Path) -> MachineView:
    """Write the view of the machine at `sysfs` with `memory_kib` installed under `out`."""
    source = sysfs / "devices" / "system"
    cpus = _cpus(source)  # first: a tree without CPU topology fails before anything is written
    # NUMA nodes and their memory as the agent reads them (a kernel without NUMA directories
    # still has node 0 with every CPU).
    found = read_cpus(sysfs)
    numa = {n: sorted(c) for n, c in found.numa_nodes.items()}
    system = out / "system"
    if out.exists():
        shutil.rmtree(out)
    shutil.copytree(source, system, symlinks=True)
    by_id = {c.id: c for c in cpus}
    package = {n: by_id[ids[0]].package for n, ids in numa.items() if ids and ids[0] in by_id}
    nodes = sorted(numa)
    node_dir = system / "node"
    node_dir.mkdir(exist_ok=True)
    # A tree with the kernel's meminfo for every node says how much memory the machine has.
    tree_memory = found.numa_memory_kib if set(found.numa_memory_kib) == set(nodes) else {}
    if tree_memory:
        memory_kib = sum(tree_memory.values())
    # As the kernel lists them: a memory-only node (CXL, a Grace GPU's HBM) has no CPUs, and
    # a node of 0 kB (MIG's spare nodes) no memory.
    with_memory = [n for n in nodes if tree_memory.get(n, 1)]
    for name, listed in (
        ("online", nodes),
        ("possible", nodes),
        ("has_cpu", [n for n in nodes if numa[n]]),
        ("has_memory", with_memory),
        ("has_normal_memory", with_memory),
    ):
        (node_dir / name).write_text(",".join(map(str, listed)) + "\n")
    per_node = memory_kib // len(nodes)
    for n in nodes:
        d = node_dir / f"node{n}"
        d.mkdir(exist_ok=True)
        (d / "cpulist").write_text(",".join(map(str, numa[n])) + "\n")
        for cpu in numa[n]:
            link = d / f"cpu{cpu}"
            if not link.exists():
                link.symlink_to(Path("..") / ".." / "cpu" / f"cpu{cpu}")
        free = per_node * 9 // 10
        if not (d / "meminfo").exists():
            (d / "meminfo").write_text(
                f"Node {n} MemTotal:       {per_node} kB\n"
                f"Node {n} MemFree:        {free} kB\n"
                f"Node {n} MemUsed:        {per_node - free} kB\n"
                f"Node {n} HugePages_Total:     0\nNode {n} HugePages_Free:      0\n"
            )
        (d / "distance").write_text(" ".join(str(_distance(n, m, package)) for m in nodes) + "\n")
        for size in ("2048kB", "1048576kB"):
            pages = d / "hugepages" / f"hugepages-{size}"
            pages.mkdir(parents=True, exist_ok=True)
            for f in ("nr_hugepages", "free_hugepages", "surplus_hugepages"):
                (pages / f).write_text("0\n")
    cpuinfo = out / "cpuinfo"
    cpuinfo.write_text(_cpuinfo(cpus))
    meminfo = out / "meminfo"
    meminfo.write_text(_meminfo(memory_kib))
    return MachineView(system, cpuinfo, meminfo, len(cpus), tuple(nodes), memory_kib)


def _cpuinfo(cpus: list[_Cpu]) -> str:
    siblings: dict[int, int] = {}
    cores: dict[int, set[int]] = {}
    for c in cpus:
        siblings[c.package] = siblings.get(c.package, 0) + 1
        cores.setdefault(c.package, set()).add(c.core)
    blocks = []
    for c in sorted(cpus, key=lambda c: c.id):
        blocks.append(
            f"processor\t: {c.id}\nvendor_id\t: GenuineIntel\ncpu family\t: 6\nmodel\t\t: 143\n"
            f"model name\t: Simulated CPU\ncpu MHz\t\t: 2000.000\n"
            f"physical id\t: {c.package}\nsiblings\t: {siblings[c.package]}\n"
            f"core id\t\t: {c.core}\ncpu cores\t: {len(cores[c.package])}\n"
            "flags\t\t: fpu vme de pse tsc msr pae mce cx8 apic sep mtrr pge mca cmov ht\n"
        )
    return "\n".join(blocks) + "\n"


def _meminfo(total_kib: int) -> str:
    free = total_kib * 9 // 10
    return (
        f"MemTotal:       {total_kib} kB\nMemFree:        {free} kB\n"
        f"MemAvailable:   {free} kB\nBuffers:               0 kB\nCached:                0 kB\n"
        "SwapCached:            0 kB\nSwapTotal:             0 kB\nSwapFree:              0 kB\n"
        "HugePages_Total:       0\nHugePages_Free:        0\nHugePages_Rsvd:        0\n"
        "HugePages_Surp:        0\nHugepagesize:       2048 kB\nHugetlb:               0 kB\n"
    )
