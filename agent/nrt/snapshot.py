"""One reading of the node for the publisher: PodResources, NUMA facts, kubelet config → body.

The only blocking part (a gRPC call and a few sysfs reads); the publisher runs it in a thread.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from agent.audit.node_rates import RemoteRates, percent
from agent.nrt.body import NodeRef, topology_body
from agent.nrt.zones import NumaFacts, Zone, compute_zones
from agent.sources import cpu, kubelet, podresources
from agent.sources.numa_stat import node_counters
from common.node_resource_topology import REMOTE_ACCESS_ATTRIBUTE

__all__ = ["NodeSources", "numa_facts", "read_body", "with_remote_access"]


@dataclass(frozen=True, slots=True)
class NodeSources:
    sysfs_root: Path
    pod_resources_socket: Path
    kubelet_config: Path | None = None
    kubelet_config_dir: Path | None = None
    rates: RemoteRates | None = None  # the zones' remote-access attribute; None: none written


def numa_facts(root: Path) -> NumaFacts:
    info = cpu.discover(root)
    return NumaFacts(
        cpus=info.numa_nodes,
        memory_bytes={n: kib * 1024 for n, kib in info.numa_memory_kib.items()},
        distances=cpu.numa_distances(root),
    )


def with_remote_access(zones: Sequence[Zone], shares: Mapping[int, float | None]) -> list[Zone]:
    """Each zone with its remote-access percent where known (pure). The figure moves at most
    once a minute (RemoteRates' window) and in steps of 5, so the object changes, and is
    written, only when the share really moved; an unknown share writes no attribute."""
    found = []
    for zone in zones:
        value = percent(shares.get(zone.numa_node))
        attributes = ((REMOTE_ACCESS_ATTRIBUTE, str(value)),) if value is not None else ()
        found.append(replace(zone, attributes=attributes))
    return found


def read_body(sources: NodeSources, node: NodeRef) -> dict[str, Any]:
    """The object as it should be now; PodResourcesError when the kubelet cannot be asked."""
    allocatable = podresources.allocatable_resources(sources.pod_resources_socket)
    pods = podresources.list_pod_resources(sources.pod_resources_socket)
    zones: Sequence[Zone] = compute_zones(numa_facts(sources.sysfs_root), allocatable, pods)
    if sources.rates is not None:
        counters, _ = node_counters(sources.sysfs_root)  # the audit logs what is unreadable
        zones = with_remote_access(zones, sources.rates.sample(counters))
    config = kubelet.discover(sources.kubelet_config, sources.kubelet_config_dir)
    return topology_body(node, zones, config)
