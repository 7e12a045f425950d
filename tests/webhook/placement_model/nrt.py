"""NodeResourceTopology objects as the agent (and NFD's topology-updater) write them."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any


def nrt(
    node: str,
    free_gpus: Sequence[int],
    *,
    gpus_per_zone: int = 4,
    policy: str = "single-numa-node",
    scope: str = "container",
    cpus_per_zone: int = 56,
    free_cpus: Sequence[int] | None = None,
) -> dict[str, Any]:
    """A v1alpha2 object with one `node-<i>` zone per entry of `free_gpus`."""
    zones = []
    for i, free in enumerate(free_gpus):
        cpus = free_cpus[i] if free_cpus is not None else cpus_per_zone
        resources = [
            _resource("cpu", cpus_per_zone, cpus),
            _resource("memory", 1 << 40, 1 << 40),
            _resource("nvidia.com/gpu", gpus_per_zone, free),
            _resource("rdma/ib", 4, 4),
        ]
        zones.append({"name": f"node-{i}", "type": "Node", "resources": resources})
    return {
        "apiVersion": "topology.node.k8s.io/v1alpha2",
        "kind": "NodeResourceTopology",
        "metadata": {"name": node},
        "topologyPolicies": [],
        "attributes": [
            {"name": "topologyManagerPolicy", "value": policy},
            {"name": "topologyManagerScope", "value": scope},
        ],
        "zones": zones,
    }


def _resource(name: str, allocatable: int, available: int) -> dict[str, Any]:
    return {
        "name": name,
        "capacity": str(allocatable),
        "allocatable": str(allocatable),
        "available": str(available),
    }
