"""The human view of a discovery: labels, then an `nvidia-smi topo -m`-style GPU×NIC matrix."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from agent.discovery.topology import Nic, Topology
from agent.sources.cpu import format_cpulist

__all__ = ["render_matrix", "render_table"]


def _grid(rows: Sequence[Sequence[str]]) -> list[str]:
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return [
        "  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() for row in rows
    ]


def _nic_facts(nic: Nic) -> list[str]:
    facts = [nic.bdf, *nic.netdevs]
    facts += [" ".join(filter(None, (p.state, p.rate))) for p in nic.ports if p.state or p.rate]
    return facts


def render_matrix(topo: Topology) -> list[str]:
    """GPU rows, NIC columns, then CPU Affinity and NUMA Affinity, as nvidia-smi prints them."""
    if not topo.gpus:
        return ["no NVIDIA GPU found"]
    header = ["", *(f"NIC{n.index}" for n in topo.nics), "CPU Affinity", "NUMA Affinity"]
    rows = [header]
    for gpu in topo.gpus:
        numa = gpu.place.numa_node
        rows.append(
            [
                f"GPU{gpu.index}",
                *topo.links[gpu.index],
                format_cpulist(topo.node_cpus(numa)) or "N/A",
                "N/A" if numa is None else str(numa),
            ]
        )
    lines = _grid(rows)
    if topo.nics:
        lines += ["", "NIC Legend:"]
        lines += [f"  NIC{n.index}: {n.name} ({', '.join(_nic_facts(n))})" for n in topo.nics]
    return lines


def _devices(topo: Topology) -> list[str]:
    rows = [["device", "pci", "numa", "switch", "root complex", "paired with"]]
    for gpu in topo.gpus:
        nic = topo.pairs.get(gpu.index)
        rows.append(
            [
                f"GPU{gpu.index}" + (f" {gpu.product}" if gpu.product else ""),
                gpu.bdf,
                "-" if gpu.place.numa_node is None else str(gpu.place.numa_node),
                gpu.place.switch or "-",
                gpu.place.root_complex,
                "-" if nic is None else topo.nics[nic].name,
            ]
        )
    for n in topo.nics:
        rows.append(
            [
                n.name,
                n.bdf,
                "-" if n.place.numa_node is None else str(n.place.numa_node),
                n.place.switch or "-",
                n.place.root_complex,
                "",
            ]
        )
    return _grid(rows) if len(rows) > 1 else []


def render_table(labels: Mapping[str, str], topo: Topology) -> str:
    lines = ["Labels:"]
    lines += [f"  {key}={value}" for key, value in labels.items()]
    lines += ["", "CPU:"]
    for socket in topo.sockets:
        lines.append(
            f"  socket {socket.id}: {socket.cores} cores, CPUs {format_cpulist(socket.cpus)}"
        )
    for node in topo.numa_nodes:
        lines.append(f"  NUMA node {node.id}: CPUs {format_cpulist(node.cpus) or '(none)'}")
    lines += ["", "GPU×NIC links:", *render_matrix(topo)]
    devices = _devices(topo)
    if devices:
        lines += ["", *devices]
    if topo.nvml_reason:
        lines += ["", f"NVML: {topo.nvml_reason}"]
    return "\n".join(lines) + "\n"
