"""Measured locality of each GPU pod against its GPUs' NUMA nodes (pure).

Per pod: the share of its memory (pages the kernel counts, agent.audit.measure) on the NUMA
nodes of the GPUs its containers hold, and the share of the CPUs it may use there. The verdict
reads the memory share only (exclusive CPUs already have `cpus-remote`):
- `local`: at least `threshold` of the memory on the GPUs' nodes;
- `remote`: less than that (a pod keeps its last verdict while its share is within
  HYSTERESIS of the threshold);
- `unknown`: nothing trustworthy was read (no UID, no cgroup, a process exited mid-read, a
  garbled file), no page counted yet, or the GPUs' NUMA nodes are unknown. Never `local`.
This is where the pages are, not what the Memory Manager assigned (`memory-remote` in the
container verdicts), and it is kept apart from those.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace

from agent.audit.measure import PodNuma, Unmeasured
from agent.audit.verdict import ContainerAudit
from agent.discovery.topology import Topology

__all__ = [
    "DEFAULT_THRESHOLD",
    "HYSTERESIS",
    "LOCALITY_VERDICTS",
    "PodLocality",
    "gpu_pods",
    "judge",
    "localities",
    "locality_counts",
]

LOCALITY_VERDICTS = ("local", "remote", "unknown")
# A rank's own allocations land where it first touches them; what else sits on the far node
# (libraries' page cache, a loader that ran before pinning) is typically a few percent. Under
# 80% on the GPUs' nodes is more than that: the pod's memory is not where its GPUs are.
DEFAULT_THRESHOLD = 0.8
# A pod whose share hovers at the threshold keeps its verdict until the share is this far on
# the other side: one page fault more must not flip a series and a log line every audit.
HYSTERESIS = 0.02
_GIB = 1 << 30


@dataclass(frozen=True, slots=True)
class PodLocality:
    namespace: str
    pod: str
    verdict: str
    reason: str
    gpu_numa: frozenset[int]
    memory_bytes: Mapping[int, int] = field(default_factory=dict)
    memory_share: float | None = None  # on the GPUs' NUMA nodes, 0..1
    cpu_share: float | None = None  # of the CPUs it may use, on the GPUs' NUMA nodes
    source: str | None = None  # "cgroup v1", "cgroup v2", "numa_maps"


def gpu_pods(audits: Iterable[ContainerAudit]) -> dict[tuple[str, str], dict[str, frozenset[int]]]:
    """(namespace, pod) → {GPU container: its GPUs' NUMA nodes}."""
    pods: dict[tuple[str, str], dict[str, frozenset[int]]] = {}
    for a in audits:
        pods.setdefault((a.namespace, a.pod), {})[a.container] = a.gpu_numa
    return pods


def _nodes(nodes: Iterable[int]) -> str:
    ordered = sorted(nodes)
    word = "node" if len(ordered) == 1 else "nodes"
    return f"NUMA {word} {','.join(map(str, ordered))}"


def _size(n: int) -> str:
    return f"{n / _GIB:.1f} GiB" if n >= _GIB // 10 else f"{n >> 20} MiB"


def _cpu_share(
    topo: Topology, cpus: frozenset[int] | None, gpu_numa: frozenset[int]
) -> float | None:
    if not cpus:
        return None
    near = {c for n in topo.numa_nodes if n.id in gpu_numa for c in n.cpus}
    return len(cpus & near) / len(cpus)


def judge(
    namespace: str,
    pod: str,
    gpu_numa: frozenset[int],
    reading: PodNuma | Unmeasured,
    topo: Topology,
    threshold: float,
    previous: str | None = None,
) -> PodLocality:
    if isinstance(reading, Unmeasured):
        return PodLocality(namespace, pod, "unknown", reading.reason, gpu_numa)
    cpu_share = _cpu_share(topo, reading.cpus, gpu_numa) if gpu_numa else None
    measured = PodLocality(namespace, pod, "unknown", "", gpu_numa, reading.memory_bytes,
                           None, cpu_share, reading.source)  # fmt: skip
    if not gpu_numa:
        return replace(measured, reason="the NUMA nodes of the pod's GPUs are unknown")
    total = sum(reading.memory_bytes.values())
    if total <= 0:
        return replace(measured, reason=f"no page counted yet ({reading.source})")
    near = sum(b for n, b in reading.memory_bytes.items() if n in gpu_numa)
    share = near / total
    far = {n: b for n, b in reading.memory_bytes.items() if n not in gpu_numa and b}
    text = f"{share:.0%} of {_size(total)} on {_nodes(gpu_numa)} (the GPUs')"
    if far:
        text += "; " + ", ".join(f"{_size(b)} on node {n}" for n, b in sorted(far.items()))
    text += f" ({reading.source})"
    if previous == "local":
        verdict = "local" if share >= threshold - HYSTERESIS else "remote"
    elif previous == "remote":
        verdict = "remote" if share < threshold + HYSTERESIS else "local"
    else:
        verdict = "local" if share >= threshold else "remote"
    if verdict == "remote":
        text += f"; under the {threshold:.0%} threshold"
    return replace(measured, verdict=verdict, reason=text, memory_share=share)


def localities(
    audits: Sequence[ContainerAudit],
    readings: Mapping[tuple[str, str], PodNuma | Unmeasured],
    topo: Topology,
    *,
    threshold: float = DEFAULT_THRESHOLD,
    previous: Mapping[tuple[str, str], str] | None = None,
) -> tuple[PodLocality, ...]:
    """One PodLocality per pod holding a GPU, sorted by namespace and pod; `previous`: each
    pod's last verdict (for the hysteresis)."""
    found = []
    for key, containers in sorted(gpu_pods(audits).items()):
        gpu_numa = frozenset().union(*containers.values())
        reading = readings.get(key, Unmeasured("not measured"))
        last = (previous or {}).get(key)
        found.append(judge(key[0], key[1], gpu_numa, reading, topo, threshold, last))
    return tuple(found)


def locality_counts(pods: Iterable[PodLocality]) -> dict[str, int]:
    """Pods per locality verdict, every verdict present."""
    seen = {v: 0 for v in LOCALITY_VERDICTS}
    for p in pods:
        seen[p.verdict] += 1
    return seen
