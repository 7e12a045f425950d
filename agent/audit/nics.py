"""The NIC check: does every GPU of the container have a held NIC at PXB or better? (pure)

Placed GPUs are judged by their links. A GPU whose ID names no PCI function here (a UUID
without NVML or the driver's /proc files) has only the NUMA node its device plugin reported.

Which of that node's GPUs it is stays unknown — but the container's k such GPUs on
node n are k of the node's GPUs that nobody else holds by a known address. Whatever k they
are, the worst of their best links to the held NICs lies between the k-th best and the worst
of those candidates' best links: when even that bound decides PXB-or-better, so can we.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass

from agent.audit.resolve import Held
from agent.discovery.links import Place, classify, link_rank
from agent.discovery.topology import Topology

__all__ = ["FAR_FROM", "GpuNicLink", "GroupBound", "NicCheck", "check_nics", "unplaced_gpu_bounds"]

FAR_FROM = link_rank("PXB")  # worse than this is too far for GPUDirect RDMA's default level


@dataclass(frozen=True, slots=True)
class GpuNicLink:
    gpu: str  # Held.label
    nic: str
    link: str | None  # None: not known (a device without a PCI place on this machine)


@dataclass(frozen=True, slots=True)
class NicCheck:
    far: tuple[str, ...]  # why each far GPU (or group) is far
    unknown: tuple[str, ...]  # labels of GPUs whose nearness cannot be told
    worst: str | None  # worst over the GPUs of each one's best held-NIC link (bounds included)


@dataclass(frozen=True, slots=True)
class GroupBound:
    numa_node: int
    gpus: tuple[str, ...]  # Held.label of the unplaced GPUs on this node
    candidates: int  # GPUs of the node they can be
    best_case: str  # the worst link among them if they are the best-placed candidates
    worst_case: str  # … if they are the worst-placed ones


def _best_link(place: Place, numa: int, nics: Sequence[Held]) -> str | None:
    words: list[str] = []
    for nic in nics:
        if nic.place is not None:
            words.append(classify(place, nic.place))
        elif nic.numa_node is not None and nic.numa_node != numa:
            words.append("SYS")
        else:
            return None  # a NIC on the same node without a PCI place: anything from PIX up
    return min(words, key=link_rank, default=None)


def unplaced_gpu_bounds(
    gpus: Sequence[Held], nics: Sequence[Held], topo: Topology, taken: Collection[str]
) -> list[GroupBound]:
    """Bounds per NUMA node for the GPUs without a PCI place (`taken`: addresses of GPUs held
    by known address anywhere on the node, this container included)."""
    groups: dict[int, list[str]] = {}
    for g in gpus:
        if g.place is None and g.numa_node is not None:
            groups.setdefault(g.numa_node, []).append(g.label)
    bounds: list[GroupBound] = []
    for node, labels in sorted(groups.items()):
        candidates = [
            gpu.place for gpu in topo.gpus if gpu.place.numa_node == node and gpu.bdf not in taken
        ]
        if len(labels) > len(candidates):
            continue  # more GPUs than the node has free: the report does not fit this machine
        words = [_best_link(place, node, nics) for place in candidates]
        if any(w is None for w in words):
            continue
        ranked = sorted((w for w in words if w is not None), key=link_rank)
        bounds.append(
            GroupBound(
                numa_node=node,
                gpus=tuple(labels),
                candidates=len(candidates),
                best_case=ranked[len(labels) - 1],
                worst_case=ranked[-1],
            )
        )
    return bounds


def _link(gpu: Held, nic: Held) -> str | None:
    if gpu.place is not None and nic.place is not None:
        return classify(gpu.place, nic.place)
    if gpu.numa_node is not None and nic.numa_node is not None and gpu.numa_node != nic.numa_node:
        return "SYS"  # different NUMA nodes: across the socket link whatever the PCI path
    return None


def gpu_nic_links(gpus: Sequence[Held], nics: Sequence[Held]) -> tuple[GpuNicLink, ...]:
    return tuple(GpuNicLink(g.label, n.label, _link(g, n)) for g in gpus for n in nics)


def check_nics(
    gpus: Sequence[Held],
    nics: Sequence[Held],
    links: Sequence[GpuNicLink],
    topo: Topology,
    taken: Collection[str],
) -> NicCheck:
    far: list[str] = []
    unknown: list[str] = []
    bests: list[str] = []
    bounds = unplaced_gpu_bounds(gpus, nics, topo, taken)
    grouped = {label for b in bounds for label in b.gpus}
    for g in gpus:
        if g.label in grouped:
            continue
        words = [(lk.link, lk.nic) for lk in links if lk.gpu == g.label]
        known = [(w, n) for w, n in words if w is not None]
        best = min(known, key=lambda wn: link_rank(wn[0]), default=None)
        if best is not None and link_rank(best[0]) <= FAR_FROM:
            bests.append(best[0])
        elif len(known) < len(words):
            unknown.append(g.label)
        elif best is not None:
            bests.append(best[0])
            far.append(f"{g.label} reaches its nearest held NIC {best[1]} at {best[0]}")
    for b in bounds:
        if link_rank(b.best_case) > FAR_FROM:
            bests.append(b.best_case)
            far.append(
                f"{', '.join(b.gpus)} (on NUMA node {b.numa_node}, PCI address unknown) reach a "
                f"held NIC at best at {b.best_case}, whichever of the node's {b.candidates} "
                "free GPUs they are"
            )
        elif link_rank(b.worst_case) > FAR_FROM:
            unknown.extend(b.gpus)
        else:
            bests.append(b.worst_case)
    worst = max(bests, key=link_rank) if bests and not unknown else None
    return NicCheck(far=tuple(far), unknown=tuple(unknown), worst=worst)
