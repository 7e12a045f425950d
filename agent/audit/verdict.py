"""One GPU container's assignment judged against the hardware (pure).

The GPUs' NUMA nodes are the reference. Checks, worst first; the first that fails gives the
verdict and every failure is kept in `problems`:
- `unknown`: no GPU could be placed on a NUMA node, or the CPUs are not this machine's;
- `shared-cpus`: no exclusive CPUs, so the kubelet aligned nothing (the reason says why);
- `cpus-remote`: exclusive CPUs on a NUMA node that holds none of the container's GPUs;
- `nic-far`: the container holds RDMA NICs, but a GPU has none of them at PXB or better;
- `memory-remote`: pinned memory (memory manager) on a NUMA node without the GPUs;
- `unknown` again when nothing failed but a fact was missing (a GPU's link to a held NIC);
- else `aligned`.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable
from dataclasses import dataclass

from agent.audit.nics import GpuNicLink, check_nics, gpu_nic_links
from agent.audit.resolve import Held, Resolver
from agent.discovery.topology import Topology
from agent.sources.cpu import format_cpulist
from agent.sources.podresources import ContainerResources, PodResources

__all__ = ["VERDICTS", "ContainerAudit", "GpuNicLink", "audit_container", "audit_pods"]

VERDICTS = ("aligned", "cpus-remote", "shared-cpus", "nic-far", "memory-remote", "unknown")
_NOT_HERE = "the device ID is not a GPU of this node and the device plugin gave no topology"


@dataclass(frozen=True, slots=True)
class ContainerAudit:
    namespace: str
    pod: str
    container: str
    verdict: str
    reason: str
    problems: tuple[tuple[str, str], ...]  # (verdict, reason) of every check that failed
    gpus: tuple[Held, ...]
    nics: tuple[Held, ...]
    cpus: frozenset[int]
    cpus_from_pod: bool  # the pod-level exclusive set (pod-level resources), not the container's
    gpu_numa: frozenset[int]
    cpu_numa: frozenset[int]
    memory_numa: frozenset[int]
    links: tuple[GpuNicLink, ...]
    nic_link: str | None = None  # worst over the GPUs of each one's best held-NIC link


def _nodes(nodes: Iterable[int]) -> str:
    ordered = sorted(nodes)
    word = "node" if len(ordered) == 1 else "nodes"
    return f"NUMA {word} {','.join(map(str, ordered))}" if ordered else "no NUMA node"


def _shared_reason(topo: Topology) -> str:
    policy = topo.kubelet.cpu_manager_policy
    if policy == "none":
        return "no exclusive CPUs: the kubelet's CPU manager policy is none (set static)"
    if policy == "static":
        return (
            "no exclusive CPUs: the pod is not Guaranteed with a whole-number CPU request for "
            "this container (the kubelet's CPU manager policy is static)"
        )
    return (
        "no exclusive CPUs: the pod is not Guaranteed with whole-number CPUs, or the kubelet's "
        "CPU manager policy is none"
    )


def _topology_hint(topo: Topology) -> str:
    policy = topo.kubelet.topology_manager_policy
    if policy in ("none", "best-effort"):
        return (
            f"; the topology manager policy is {policy} (restricted or single-numa-node enforce it)"
        )
    return ""


def _socket_note(topo: Topology, remote: list[int], gpu_numa: frozenset[int]) -> str:
    """Same socket (NPS2/NPS4, sub-NUMA clustering) is a nearer miss than the other socket."""
    gpu_cpus = frozenset().union(*(topo.node_cpus(n) for n in gpu_numa))
    gpu_sockets = {s.id for s in topo.sockets if s.cpus & gpu_cpus}
    cpu_sockets = {s.id for s in topo.sockets if s.cpus & set(remote)}
    if not gpu_sockets or not cpu_sockets:
        return ""
    return " (same socket as the GPUs)" if cpu_sockets <= gpu_sockets else " (another socket)"


def _cpus_of(pod: PodResources, container: ContainerResources) -> tuple[frozenset[int], bool]:
    if container.cpu_ids or not pod.cpu_ids:
        return frozenset(container.cpu_ids), False
    # Pod-level exclusive CPUs include every container's own: the rest is this one's pool.
    others = {cpu for c in pod.containers if c is not container for cpu in c.cpu_ids}
    return frozenset(pod.cpu_ids) - others, True


def _machine_order(h: Held) -> tuple[int, str, str]:
    return (h.gpu_index if h.gpu_index is not None else 1 << 30, h.bdf or "", h.id)


def _held_devices(container: ContainerResources, resolver: Resolver) -> list[Held]:
    """What the container holds, device-plugin IDs and DRA claims, in machine order (the
    kubelet keeps device IDs in a set: report them in the machine's order, not its order)."""
    held = [
        resolver.resolve(device_id, d.resource_name, d.numa_nodes)
        for d in container.devices
        for device_id in d.device_ids
    ]
    held += [resolver.resolve_claim(c) for c in container.claims]
    held.sort(key=_machine_order)
    return held


def _aligned_reason(
    gpu_numa: frozenset[int],
    cpu_numa: frozenset[int],
    memory_numa: frozenset[int],
    nic_link: str | None,
    *,
    held_nics: bool,
) -> str:
    """Why an aligned container is aligned; `nic_link`: the worst of the GPUs' best links to
    a held NIC."""
    parts = [f"GPUs on {_nodes(gpu_numa)}", f"exclusive CPUs on {_nodes(cpu_numa)}"]
    if memory_numa:
        parts.append(f"memory on {_nodes(memory_numa)}")
    if held_nics:
        parts.append(f"every GPU has a held NIC at {nic_link} or better")
    else:
        parts.append("no RDMA NIC held")
    return "; ".join(parts)


def audit_container(
    pod: PodResources,
    container: ContainerResources,
    resolver: Resolver,
    topo: Topology,
    taken: Collection[str] = (),
) -> ContainerAudit | None:
    """The audit of one container, or None when it holds no GPU. `taken`: PCI addresses of
    the GPUs any container of the node holds by a known address."""
    held = _held_devices(container, resolver)
    gpus = tuple(h for h in held if h.kind == "gpu")
    if not gpus:
        return None
    nics = tuple(h for h in held if h.kind == "nic")
    cpus, from_pod = _cpus_of(pod, container)
    memory = container.memory or (pod.memory if from_pod else ())
    node_of = {cpu: n.id for n in topo.numa_nodes for cpu in n.cpus}
    gpu_numa = frozenset(g.numa_node for g in gpus if g.numa_node is not None)
    cpu_numa = frozenset(node_of[c] for c in cpus if c in node_of)
    memory_numa = frozenset(n for block in memory for n in block.numa_nodes)
    links = gpu_nic_links(gpus, nics)
    problems: list[tuple[str, str]] = []
    unplaced = [g.label for g in gpus if g.numa_node is None]
    foreign = sorted(c for c in cpus if c not in node_of)
    if not gpu_numa:
        problems.append(("unknown", f"NUMA node of {', '.join(unplaced)} unknown: {_NOT_HERE}"))
    if foreign:
        problems.append(
            ("unknown", f"CPUs {format_cpulist(foreign)} are not online CPUs of this node")
        )
    if not cpus:
        problems.append(("shared-cpus", _shared_reason(topo)))
    elif gpu_numa and cpu_numa - gpu_numa:
        remote = sorted(c for c in cpus if node_of.get(c) not in gpu_numa)
        problems.append((
            "cpus-remote",
            f"exclusive CPUs {format_cpulist(remote)} on {_nodes(cpu_numa - gpu_numa)}"
            f"{_socket_note(topo, remote, gpu_numa)}, GPUs on {_nodes(gpu_numa)}"
            f"{_topology_hint(topo)}",
        ))  # fmt: skip
    nic = check_nics(gpus, nics, links, topo, taken)
    if nic.far:
        problems.append(("nic-far", "no held NIC at PXB or better: " + "; ".join(nic.far)))
    if gpu_numa and memory_numa - gpu_numa:
        problems.append((
            "memory-remote",
            f"memory pinned on {_nodes(memory_numa - gpu_numa)}, GPUs on {_nodes(gpu_numa)}",
        ))  # fmt: skip
    if not problems:
        if unplaced:
            problems.append(("unknown", f"NUMA node of {', '.join(unplaced)} unknown"))
        elif nic.unknown:
            problems.append(("unknown", f"link of {', '.join(nic.unknown)} to the held NICs "
                             "unknown: a device's PCI address is not known here (GPU UUIDs "
                             "need NVML or /proc/driver/nvidia)"))  # fmt: skip
    if problems:
        verdict, reason = problems[0]
    else:
        verdict = "aligned"
        reason = _aligned_reason(gpu_numa, cpu_numa, memory_numa, nic.worst, held_nics=bool(nics))
    return ContainerAudit(
        namespace=pod.namespace,
        pod=pod.name,
        container=container.name,
        verdict=verdict,
        reason=reason,
        problems=tuple(problems),
        gpus=gpus,
        nics=nics,
        cpus=cpus,
        cpus_from_pod=from_pod,
        gpu_numa=gpu_numa,
        cpu_numa=cpu_numa,
        memory_numa=memory_numa,
        links=links,
        nic_link=nic.worst if nics else None,
    )


def audit_pods(
    pods: Iterable[PodResources], resolver: Resolver, topo: Topology
) -> tuple[ContainerAudit, ...]:
    """Every GPU container, sorted by namespace, pod and container."""
    pods = tuple(pods)
    taken = {
        held.bdf
        for pod in pods
        for c in pod.containers
        for d in c.devices
        for device_id in d.device_ids
        if (held := resolver.resolve(device_id, d.resource_name, d.numa_nodes)).kind == "gpu"
        and held.bdf is not None
    }
    found = [
        a
        for pod in pods
        for c in pod.containers
        if (a := audit_container(pod, c, resolver, topo, taken)) is not None
    ]
    return tuple(sorted(found, key=lambda a: (a.namespace, a.pod, a.container)))
