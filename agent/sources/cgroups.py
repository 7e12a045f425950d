"""Pods' cgroups under the sysfs root: where each controller is mounted, each pod's directory,
and the raw files the locality audit reads there (reads only).

The memory and cpuset controllers are found each on its own, since a host can mix the two
versions (hybrid systemd: v1 controllers beside a v2 `unified` tree; or v2 with a controller
still bound to v1): a controller is v2 when `fs/cgroup/cgroup.controllers` (or
`fs/cgroup/unified/cgroup.controllers`) lists it, else v1 when `fs/cgroup/<controller>` is a
directory. The kubelet puts each pod under `kubepods[.slice]`, directly (Guaranteed) or below
its QoS class, named `pod<uid>` (cgroupfs driver) or `kubepods[-<qos>]-pod<uid with _>.slice`
(systemd driver); its containers are the pod directory's children. Only those two levels are
listed, so the cost is the pods of the node, never more.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

from agent.sources import SysfsError, read_bounded, read_text
from agent.sources.cpu import parse_cpulist

__all__ = [
    "Controller",
    "Layout",
    "children",
    "cpuset_effective",
    "layout",
    "pod_dirs",
    "procs",
]

_KUBEPODS = ("kubepods.slice", "kubepods")
_QOS = ("besteffort", "burstable", "kubepods-besteffort.slice", "kubepods-burstable.slice")
_UID = r"[0-9a-f]{8}[-_][0-9a-f]{4}[-_][0-9a-f]{4}[-_][0-9a-f]{4}[-_][0-9a-f]{12}"
_POD = re.compile(rf"(?:kubepods(?:-besteffort|-burstable)?-)?pod({_UID})(?:\.slice)?")
# Bounds on one pod: containers (children) and the processes read for the numa_maps fallback.
MAX_CHILDREN = 256
MAX_PROCS = 4096


@dataclass(frozen=True, slots=True)
class Controller:
    version: int  # 1 or 2
    mount: str  # the hierarchy's root directory under the sysfs root


@dataclass(frozen=True, slots=True)
class Layout:
    memory: Controller | None
    cpuset: Controller | None
    any_tree: tuple[Controller, ...]  # every hierarchy a pod directory may be found in


def _v2_controllers(base: str) -> tuple[str, frozenset[str]] | None:
    for mount in (base, os.path.join(base, "unified")):
        try:
            return mount, frozenset(read_text(os.path.join(mount, "cgroup.controllers"),
                                              allow_empty=True).split())  # fmt: skip
        except SysfsError:
            continue
    return None


def layout(root: Path) -> Layout:
    """Where the memory and cpuset controllers live under `<root>/fs/cgroup`."""
    base = os.path.join(root, "fs/cgroup")
    v2 = _v2_controllers(base)
    found: dict[str, Controller | None] = {}
    for name in ("memory", "cpuset"):
        if v2 is not None and name in v2[1]:
            found[name] = Controller(2, v2[0])
        elif os.path.isdir(os.path.join(base, name)):
            found[name] = Controller(1, os.path.join(base, name))
        else:
            found[name] = None
    trees = [c for c in found.values() if c is not None]
    if v2 is not None:
        trees.append(Controller(2, v2[0]))  # a v2 tree without controllers still has procs
    systemd = os.path.join(base, "systemd")
    if os.path.isdir(systemd):
        trees.append(Controller(1, systemd))
    unique = tuple(dict.fromkeys(trees))
    return Layout(memory=found["memory"], cpuset=found["cpuset"], any_tree=unique)


def _listdir(path: str) -> list[str]:
    try:
        return [e.name for e in os.scandir(path) if e.is_dir(follow_symlinks=False)]
    except OSError:
        return []


def pod_dirs(tree: Controller) -> dict[str, str]:
    """Pod UID (with dashes) → its directory in this hierarchy."""
    found: dict[str, str] = {}
    for top in _KUBEPODS:
        kubepods = os.path.join(tree.mount, top)
        for name in _listdir(kubepods):
            if (m := _POD.fullmatch(name)) is not None:
                found[m[1].replace("_", "-")] = os.path.join(kubepods, name)
            elif name in _QOS:
                for sub in _listdir(os.path.join(kubepods, name)):
                    if (m := _POD.fullmatch(sub)) is not None:
                        found[m[1].replace("_", "-")] = os.path.join(kubepods, name, sub)
    return found


def children(pod_dir: str) -> list[str]:
    """The pod's container directories (the sandbox's among them), at most MAX_CHILDREN."""
    names = sorted(_listdir(pod_dir))
    if len(names) > MAX_CHILDREN:
        raise SysfsError(f"{pod_dir}: more than {MAX_CHILDREN} child cgroups")
    return [os.path.join(pod_dir, n) for n in names]


def cpuset_effective(directory: str, version: int) -> tuple[frozenset[int], frozenset[int]]:
    """(CPUs, memory nodes) the cgroup's tasks may use, as the kernel computed them."""
    names = (
        ("cpuset.cpus.effective", "cpuset.mems.effective")
        if version == 2
        else ("cpuset.effective_cpus", "cpuset.effective_mems")
    )
    sets: list[frozenset[int]] = []
    for name in names:
        path = os.path.join(directory, name)
        text = read_text(path)
        try:
            sets.append(parse_cpulist(text))
        except ValueError:
            raise SysfsError(f"{path}: not a list: {text[:40]!r}") from None
    return sets[0], sets[1]


def procs(pod_dir: str) -> list[int]:
    """Process IDs in the pod's cgroup and its containers' (v1 or v2 `cgroup.procs`)."""
    found: list[int] = []
    for directory in (pod_dir, *children(pod_dir)):
        path = os.path.join(directory, "cgroup.procs")
        try:
            text = read_bounded(path, MAX_PROCS * 8)
        except SysfsError as e:
            if e.missing:
                continue  # a container that is going: its processes went with it
            raise
        for word in text.split():
            if not word.isdigit():
                raise SysfsError(f"{path}: not a process ID: {word[:20]!r}")
            found.append(int(word))
        if len(found) > MAX_PROCS:
            raise SysfsError(f"{pod_dir}: more than {MAX_PROCS} processes")
    return found
