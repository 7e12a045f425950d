"""N simulated Nodes and their NodeResourceTopology objects, and writing them concurrently.

Nodes are the example fleet's machine classes (docs/examples/nodes.yaml: real discovery
output, labels and the topology annotation as the agent writes them), cloned with a zone and
a rack label, Ready as a kubelet reports. Each gets the NodeResourceTopology its agent would
publish, from the node's own labels, with a mix of free and used NUMA nodes: by node index,
all free, half the NUMA nodes' GPUs taken, one NUMA node full, or every GPU taken.
"""

from __future__ import annotations

import concurrent.futures
from collections.abc import Callable, Iterable
from typing import Any

from benchmarks.webhook.bench_node_cache import fleet_objects
from common.node_resource_topology import GROUP, POLICY_ATTRIBUTE, SCOPE_ATTRIBUTE, VERSION

__all__ = ["USE_MIX", "fleet", "nrt_object", "write_all"]

# Share of each NUMA node's GPUs in use, per node index modulo 4.
USE_MIX = ("all free", "half the NUMA nodes taken", "NUMA node 0 taken", "every GPU taken")
_HEARTBEAT = "2026-01-01T00:00:00Z"  # no node-lifecycle controller reads it


def _ready(node: dict[str, Any]) -> dict[str, Any]:
    node.pop("apiVersion", None)
    node.pop("kind", None)
    for key in ("uid", "resourceVersion", "creationTimestamp", "managedFields"):
        node["metadata"].pop(key, None)
    status = node.setdefault("status", {})
    status["conditions"] = [
        {
            "type": "Ready",
            "status": "True",
            "reason": "KubeletReady",
            "message": "simulated for the scale bench",
            "lastHeartbeatTime": _HEARTBEAT,
            "lastTransitionTime": _HEARTBEAT,
        }
    ]
    status["addresses"] = [{"type": "InternalIP", "address": "127.0.0.1"}]
    return node


def fleet(count: int) -> list[dict[str, Any]]:
    """`count` Ready Node objects; the first N of a larger fleet are the same N nodes."""
    return [_ready(n) for n in fleet_objects(count)]


def _used(gpus: int, zone: int, zones: int, index: int) -> int:
    mix = index % len(USE_MIX)
    if mix == 1:
        return gpus if zone < zones // 2 else 0
    if mix == 2:
        return gpus if zone == 0 else 0
    return gpus if mix == 3 else 0


def nrt_object(node: dict[str, Any], index: int) -> dict[str, Any]:
    """The NodeResourceTopology an agent publishes for `node` (per-NUMA counts from its
    labels), with USE_MIX[index % 4] of its GPUs in use."""
    labels = node["metadata"]["labels"]
    zones = max(1, int(labels.get("topoplace.io/numa-nodes", "1")))
    gpus = int(labels.get("topoplace.io/gpus", "0")) // zones
    cpus = int(labels.get("topoplace.io/max-cpus-per-numa-node", "2"))
    memory = int(labels.get("topoplace.io/max-memory-gib-per-numa-node", "4")) * 2**30
    out = []
    for z in range(zones):
        used = _used(gpus, z, zones, index)
        resources = [
            {
                "name": "cpu",
                "capacity": str(cpus),
                "allocatable": str(cpus),
                "available": str(cpus - min(cpus, used * 12)),
            },
            {
                "name": "memory",
                "capacity": str(memory),
                "allocatable": str(memory),
                "available": str(memory - min(memory, used * 96 * 2**30)),
            },
        ]
        if gpus:
            resources.append(
                {
                    "name": "nvidia.com/gpu",
                    "capacity": str(gpus),
                    "allocatable": str(gpus),
                    "available": str(gpus - used),
                }
            )
        out.append({"name": f"node-{z}", "type": "Node", "resources": resources})
    name = node["metadata"]["name"]
    attributes = [
        {
            "name": POLICY_ATTRIBUTE,
            "value": labels.get("topoplace.io/topology-manager-policy", "none"),
        },
        {
            "name": SCOPE_ATTRIBUTE,
            "value": labels.get("topoplace.io/topology-manager-scope", "container"),
        },
    ]
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "NodeResourceTopology",
        "metadata": {"name": name},
        "topologyPolicies": [],
        "attributes": attributes,
        "zones": out,
    }


def write_all(
    write: Callable[[dict[str, Any]], None], objects: Iterable[dict[str, Any]], *, workers: int
) -> int:
    """`write` every object from `workers` threads (bounded: the API server shares this
    machine); the first error is raised. Returns how many were written."""
    with concurrent.futures.ThreadPoolExecutor(max_workers=workers) as pool:
        return sum(1 for _ in pool.map(write, objects))
