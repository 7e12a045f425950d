"""One reading of the node for the publisher: PodResources, NUMA facts, kubelet config → body.

The only blocking part (a gRPC call and a few sysfs reads); the publisher runs it in a thread.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agent.nrt.body import NodeRef, topology_body
from agent.nrt.zones import NumaFacts, compute_zones
from agent.sources import cpu, kubelet, podresources

__all__ = ["NodeSources", "numa_facts", "read_body"]


@dataclass(frozen=True, slots=True)
class NodeSources:
    sysfs_root: Path
    pod_resources_socket: Path
    kubelet_config: Path | None = None
    kubelet_config_dir: Path | None = None


def numa_facts(root: Path) -> NumaFacts:
    info = cpu.discover(root)
    return NumaFacts(
        cpus=info.numa_nodes,
        memory_bytes={n: kib * 1024 for n, kib in info.numa_memory_kib.items()},
        distances=cpu.numa_distances(root),
    )


def read_body(sources: NodeSources, node: NodeRef) -> dict[str, Any]:
    """The object as it should be now; PodResourcesError when the kubelet cannot be asked."""
    allocatable = podresources.allocatable_resources(sources.pod_resources_socket)
    pods = podresources.list_pod_resources(sources.pod_resources_socket)
    zones = compute_zones(numa_facts(sources.sysfs_root), allocatable, pods)
    config = kubelet.discover(sources.kubelet_config, sources.kubelet_config_dir)
    return topology_body(node, zones, config)
