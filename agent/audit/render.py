"""The audit's two views: a table in `nvidia-smi topo -m` style (one row per GPU container,
then the reasons, as nvidia-smi prints its legend) and the JSON document.

JSON (a contract: docs/architecture.md, "Public contracts"): `{"containers": [...],
"counts": {verdict: n}, "kubelet": {...}}`; each container has `namespace`, `pod`,
`container`, `verdict`, `reason`, `problems` (every failed check), `gpus`, `nics`, `cpus`,
`gpuNumaNodes`, `cpuNumaNodes`, `memoryNumaNodes` and `gpuNicLinks` (`[{gpu, nic, link}]`, link
null when unknown). With the measured locality (agent.audit.probe): `"locality": {"threshold",
"counts", "pods": [{namespace, pod, verdict, reason, gpuNumaNodes, memoryShare, cpuShare,
memoryBytesByNumaNode, source}]}`; shares are null when not measured.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from typing import Any

from agent.audit.locality import PodLocality, locality_counts
from agent.audit.probe import LocalityReport
from agent.audit.resolve import Held
from agent.audit.verdict import VERDICTS, ContainerAudit
from agent.discovery.topology import Topology
from agent.sources.cpu import format_cpulist

__all__ = ["as_document", "counts", "render_table"]


def counts(audits: Iterable[ContainerAudit]) -> dict[str, int]:
    """Containers per verdict, every verdict present (zeros included)."""
    seen = Counter(a.verdict for a in audits)
    return {v: seen.get(v, 0) for v in VERDICTS}


def _nodes(nodes: Iterable[int]) -> list[int]:
    return sorted(nodes)


def _device(h: Held) -> dict[str, Any]:
    doc: dict[str, Any] = {"id": h.id, "resource": h.resource, "pci": h.bdf, "numa": h.numa_node}
    if h.gpu_index is not None:
        doc["index"] = h.gpu_index
    if h.kind == "nic":
        doc["name"] = h.rdma_name
        doc["virtualFunction"] = h.virtual_function
    if h.plugin_numa:
        doc["pluginNuma"] = list(h.plugin_numa)
    return doc


def _container(a: ContainerAudit) -> dict[str, Any]:
    return {
        "namespace": a.namespace,
        "pod": a.pod,
        "container": a.container,
        "verdict": a.verdict,
        "reason": a.reason,
        "problems": [{"verdict": v, "reason": r} for v, r in a.problems],
        "gpus": [_device(g) for g in a.gpus],
        "nics": [_device(n) for n in a.nics],
        "cpus": format_cpulist(a.cpus),
        "cpusFromPod": a.cpus_from_pod,
        "gpuNumaNodes": _nodes(a.gpu_numa),
        "cpuNumaNodes": _nodes(a.cpu_numa),
        "memoryNumaNodes": _nodes(a.memory_numa),
        "gpuNicLinks": [{"gpu": lk.gpu, "nic": lk.nic, "link": lk.link} for lk in a.links],
        "nicLink": a.nic_link,
    }


def _pod(p: PodLocality) -> dict[str, Any]:
    def share(v: float | None) -> float | None:
        return None if v is None else round(v, 4)

    return {
        "namespace": p.namespace,
        "pod": p.pod,
        "verdict": p.verdict,
        "reason": p.reason,
        "gpuNumaNodes": _nodes(p.gpu_numa),
        "memoryShare": share(p.memory_share),
        "cpuShare": share(p.cpu_share),
        "memoryBytesByNumaNode": {str(n): b for n, b in sorted(p.memory_bytes.items())},
        "source": p.source,
    }


def _locality(report: LocalityReport, threshold: float | None) -> dict[str, Any]:
    return {
        "threshold": threshold,
        "counts": locality_counts(report.pods),
        "pods": [_pod(p) for p in report.pods],
    }


def as_document(
    audits: Sequence[ContainerAudit],
    topology: Topology,
    report: LocalityReport | None = None,
    *,
    threshold: float | None = None,
) -> dict[str, Any]:
    k = topology.kubelet
    doc = {
        "containers": [_container(a) for a in audits],
        "counts": counts(audits),
        "kubelet": {
            "cpuManagerPolicy": k.cpu_manager_policy,
            "topologyManagerPolicy": k.topology_manager_policy,
            "topologyManagerScope": k.topology_manager_scope,
            "memoryManagerPolicy": k.memory_manager_policy,
            "topologyManagerPolicyOptions": {
                "prefer-closest-numa-nodes": k.prefer_closest_numa_nodes,
                "max-allowable-numa-nodes": k.max_allowable_numa_nodes,
            },
        },
    }
    if report is not None:
        doc["locality"] = _locality(report, threshold)
    return doc


def _grid(rows: Sequence[Sequence[str]]) -> list[str]:
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return [
        "  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() for row in rows
    ]


def _set(nodes: Iterable[int]) -> str:
    return ",".join(map(str, sorted(nodes))) or "-"


def _nic_link(a: ContainerAudit) -> str:
    """The worst, over the GPUs, of each GPU's best link to a held NIC (as gpu-nic-link)."""
    if not a.nics:
        return "-"
    return a.nic_link or "?"


def _pct(v: float | None) -> str:
    return "-" if v is None else f"{v:.0%}"


def _locality_lines(report: LocalityReport) -> list[str]:
    """Where the memory is (measured), per GPU pod: apart from what the kubelet assigned."""
    if not report.pods:
        return []
    rows = [["POD", "GPU NUMA", "MEM ON GPU NUMA", "CPUs ON GPU NUMA", "SOURCE", "LOCALITY"]]
    rows += [[f"{p.namespace}/{p.pod}", _set(p.gpu_numa), _pct(p.memory_share),
              _pct(p.cpu_share), p.source or "-", p.verdict] for p in report.pods]  # fmt: skip
    lines = ["", "Memory locality (measured):", *_grid(rows)]
    lines += [f"  {p.namespace}/{p.pod}: {p.verdict}: {p.reason}" for p in report.pods]
    return lines


def render_table(audits: Sequence[ContainerAudit], report: LocalityReport | None = None) -> str:
    if not audits:
        return "no running container holds a GPU\n"
    rows = [["POD", "CONTAINER", "GPUs", "GPU NUMA", "CPUs", "CPU NUMA", "MEM NUMA", "NICs",
             "NIC LINK", "VERDICT"]]  # fmt: skip
    for a in audits:
        rows.append(
            [
                f"{a.namespace}/{a.pod}",
                a.container,
                ",".join(g.label for g in a.gpus),
                _set(a.gpu_numa),
                format_cpulist(a.cpus) or "shared",
                _set(a.cpu_numa),
                _set(a.memory_numa),
                ",".join(n.label for n in a.nics) or "-",
                _nic_link(a),
                a.verdict,
            ]
        )
    lines = _grid(rows)
    lines += ["", "Reasons:"]
    lines += [f"  {a.namespace}/{a.pod}/{a.container}: {a.verdict}: {a.reason}" for a in audits]
    total = counts(audits)
    lines += ["", "Counts: " + ", ".join(f"{v}={n}" for v, n in total.items() if n)]
    if report is not None:
        lines += _locality_lines(report)
    return "\n".join(lines) + "\n"
