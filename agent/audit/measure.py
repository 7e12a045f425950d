"""Where each pod's memory and CPUs really are, read from the kernel (through `sources`).

A pod is found by its UID (from the API server: PodResources names pods, cgroups number them).
Memory: the pod cgroup's `memory.numa_stat` (v1 or v2, whichever holds the memory
controller); where the pod has no readable memory cgroup, the sum of `numa_maps` over its
processes (from any hierarchy's `cgroup.procs`, else a search of `/proc/*/cgroup`). CPUs and
memory nodes it may use: the `cpuset` effective files of its GPU containers' cgroups (every
container's when the container IDs are unknown), else the union of its processes'
`Cpus_allowed_list` and `Mems_allowed_list`.

Any failure makes the pod `Unmeasured` with one reason (the caller logs it once): a file
missing or garbled, a process that exits while it is read (its numbers would be partial).
Nothing here judges; agent.audit.locality does.
"""

from __future__ import annotations

import os
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agent.sources import SysfsError, read_bounded
from agent.sources import cgroups as cg
from agent.sources import procs as pr
from agent.sources.numa_stat import MEMCG_MAX_BYTES, parse_memcg_numa_stat

__all__ = [
    "NUMA_MAPS_BUDGET",
    "PodIndex",
    "PodNuma",
    "PodRef",
    "Unmeasured",
    "measure_pods",
    "pod_ref",
]

PodKey = tuple[str, str]  # (namespace, name)
# numa_maps bytes one audit pass reads at most over all pods (each file's own bound is
# agent.sources.numa_stat.NUMA_MAPS_MAX_BYTES): past it, the rest wait for a later pass.
NUMA_MAPS_BUDGET = 64 << 20


@dataclass(frozen=True, slots=True)
class PodRef:
    namespace: str
    name: str
    uid: str
    container_ids: Mapping[str, str] = field(default_factory=dict)  # name -> runtime ID


@dataclass(frozen=True, slots=True)
class PodNuma:
    """One reading of a pod: bytes per NUMA node, and the CPUs/nodes it may use (None when
    no cpuset or process status was readable)."""

    source: str  # "cgroup v1", "cgroup v2" or "numa_maps"
    memory_bytes: Mapping[int, int]
    cpus: frozenset[int] | None = None
    mems: frozenset[int] | None = None


@dataclass(frozen=True, slots=True)
class Unmeasured:
    reason: str


def pod_ref(pod: Mapping[str, Any]) -> PodRef | None:
    """A PodRef from an API Pod object (as the pod watch hears it); None without a UID."""
    meta = pod.get("metadata") or {}
    uid, namespace, name = meta.get("uid"), meta.get("namespace"), meta.get("name")
    if not (isinstance(uid, str) and isinstance(namespace, str) and isinstance(name, str)):
        return None
    ids: dict[str, str] = {}
    status = pod.get("status") or {}
    for c in status.get("containerStatuses") or []:
        cid = c.get("containerID") if isinstance(c, Mapping) else None
        if isinstance(cid, str) and isinstance(c.get("name"), str):
            ids[c["name"]] = cid.partition("://")[2] or cid  # containerd://<id> → <id>
    return PodRef(namespace=namespace, name=name, uid=uid, container_ids=ids)


@dataclass(slots=True)
class _Dirs:
    layout: cg.Layout
    memory: dict[str, str]
    cpuset: dict[str, str]
    any: dict[str, str]
    by_proc: dict[str, list[int]] | SysfsError | None = None  # from /proc, when needed


def _dirs(sysfs_root: Path) -> _Dirs:
    lay = cg.layout(sysfs_root)
    listed: dict[cg.Controller, dict[str, str]] = {}  # one listing per hierarchy (pure v2: one)

    def pods_in(tree: cg.Controller | None) -> dict[str, str]:
        if tree is None:
            return {}
        if tree not in listed:
            listed[tree] = cg.pod_dirs(tree)
        return listed[tree]

    memory, cpuset = pods_in(lay.memory), pods_in(lay.cpuset)
    trees: dict[str, str] = {}
    for tree in reversed(lay.any_tree):  # the first tree wins: memory, then cpuset
        trees.update(pods_in(tree))
    return _Dirs(layout=lay, memory=memory, cpuset=cpuset, any=trees)


def _union(
    sets: Iterable[tuple[frozenset[int], frozenset[int]]],
) -> tuple[frozenset[int], frozenset[int]]:
    cpus: set[int] = set()
    mems: set[int] = set()
    for c, m in sets:
        cpus |= c
        mems |= m
    return frozenset(cpus), frozenset(mems)


def _cpuset(
    dirs: _Dirs, ref: PodRef, gpu_containers: Collection[str], version: int
) -> tuple[frozenset[int], frozenset[int]]:
    kids = cg.children(dirs.cpuset[ref.uid])
    ids = [ref.container_ids[n] for n in gpu_containers if ref.container_ids.get(n)]
    # Container directories carry the runtime's ID (`<id>`, `cri-containerd-<id>.scope`):
    # without IDs every container counts, the sandbox's shared-pool CPUs included.
    mine = [k for k in kids if any(i in os.path.basename(k) for i in ids)] if ids else kids
    if not mine:
        raise SysfsError(f"{dirs.cpuset[ref.uid]}: no cgroup of the pod's GPU containers")
    return _union(cg.cpuset_effective(k, version) for k in mine)


def _pids(dirs: _Dirs, ref: PodRef, proc_root: Path) -> list[int]:
    if ref.uid in dirs.any:
        return cg.procs(dirs.any[ref.uid])
    if dirs.by_proc is None:  # one /proc pass serves every pod of this audit
        try:
            dirs.by_proc = pr.pods_pids(proc_root)
        except SysfsError as e:
            dirs.by_proc = e
    if isinstance(dirs.by_proc, SysfsError):
        raise dirs.by_proc
    return dirs.by_proc.get(ref.uid, [])


@dataclass(slots=True)
class _Budget:
    """numa_maps bytes one pass may still read (the fallback walks page tables: bounded)."""

    left: int


def _numa_maps(proc_root: Path, pids: list[int], budget: _Budget) -> dict[int, int]:
    memory: dict[int, int] = {}
    for pid in pids:
        if budget.left <= 0:
            raise SysfsError(
                f"the {NUMA_MAPS_BUDGET >> 20} MiB of numa_maps one audit reads are spent "
                "(a later audit measures this pod)"
            )
        nodes, size = pr.numa_maps(proc_root, pid, limit=budget.left)
        budget.left -= size
        for node, n in nodes.items():
            memory[node] = memory.get(node, 0) + n
    return memory


def _measure(
    dirs: _Dirs,
    ref: PodRef,
    proc_root: Path,
    gpu_containers: Collection[str],
    *,
    budget: _Budget,
    cached: PodNuma | None,
) -> PodNuma:
    pids: list[int] | None = None
    memory_ctl = dirs.layout.memory
    if memory_ctl is not None and ref.uid in dirs.memory:
        path = os.path.join(dirs.memory[ref.uid], "memory.numa_stat")
        text = read_bounded(path, MEMCG_MAX_BYTES)
        memory = parse_memcg_numa_stat(text, memory_ctl.version, page_size=_page_size(), path=path)
        source = f"cgroup v{memory_ctl.version}"
    elif cached is not None:
        return cached  # the fallback's own interval: numa_maps is costly to read
    else:
        pids = _pids(dirs, ref, proc_root)
        if not pids:
            raise SysfsError(f"no cgroup and no process of pod uid {ref.uid} found")
        memory = _numa_maps(proc_root, pids, budget)
        source = "numa_maps"
    cpus: frozenset[int] | None = None
    mems: frozenset[int] | None = None
    cpuset_ctl = dirs.layout.cpuset
    if cpuset_ctl is not None and ref.uid in dirs.cpuset:
        cpus, mems = _cpuset(dirs, ref, gpu_containers, cpuset_ctl.version)
    else:
        pids = pids if pids is not None else _pids(dirs, ref, proc_root)
        if pids:
            cpus, mems = _union(pr.allowed(proc_root, pid) for pid in pids)
    return PodNuma(source=source, memory_bytes=dict(sorted(memory.items())), cpus=cpus, mems=mems)


def _page_size() -> int:
    # v1 counts pages; the agent runs on the node it reads, so its page size is the node's.
    return os.sysconf("SC_PAGE_SIZE")


def _why(e: SysfsError) -> str:
    if e.missing:
        return f"{e} (the pod or a process went while it was read; the next audit retries)"
    return str(e)


def measure_pods(
    sysfs_root: Path,
    proc_root: Path,
    refs: Iterable[PodRef],
    gpu_containers: Mapping[PodKey, Collection[str]],
    *,
    cached: Mapping[PodKey, PodNuma] | None = None,
) -> dict[PodKey, PodNuma | Unmeasured]:
    """One reading per pod in `gpu_containers` (the pods holding GPUs); a pod without a
    PodRef (the API has not told its UID yet) is Unmeasured. `cached`: recent numa_maps
    readings, reused for pods that still have no memory cgroup."""
    by_key = {(r.namespace, r.name): r for r in refs}
    dirs = _dirs(sysfs_root)
    budget = _Budget(NUMA_MAPS_BUDGET)
    cached = cached or {}
    found: dict[PodKey, PodNuma | Unmeasured] = {}
    for key, containers in gpu_containers.items():
        ref = by_key.get(key)
        if ref is None:
            found[key] = Unmeasured("the pod's UID is not known (not in the pod list)")
            continue
        try:
            found[key] = _measure(dirs, ref, proc_root, containers, budget=budget,
                                  cached=cached.get(key))  # fmt: skip
        except SysfsError as e:
            found[key] = Unmeasured(_why(e))
    return found


class PodIndex:
    """PodRefs of this node's pods as the pod watch hears them (bounded: `limit` pods, the
    oldest forgotten first; a node runs at most its maxPods)."""

    def __init__(self, *, limit: int = 1024) -> None:
        self._limit = limit
        self._refs: dict[PodKey, PodRef] = {}

    def observe(self, pod: Mapping[str, Any]) -> None:
        ref = pod_ref(pod)
        if ref is None:
            return
        key = (ref.namespace, ref.name)
        meta, status = pod.get("metadata") or {}, pod.get("status") or {}
        self._refs.pop(key, None)
        if meta.get("deletionTimestamp") or status.get("phase") in ("Succeeded", "Failed"):
            return
        self._refs[key] = ref
        while len(self._refs) > self._limit:
            del self._refs[next(iter(self._refs))]

    def refs(self) -> list[PodRef]:
        return list(self._refs.values())
