"""The NodeResourceTopology object for one node (pure).

`topology.node.k8s.io/v1alpha2`, cluster-scoped, named after the node and owned by it (the
garbage collector removes it with the Node). Attributes `topologyManagerPolicy` and
`topologyManagerScope` carry the kubelet's settings under the names NFD's topology-updater
and scheduler-plugins use; `topologyPolicies` (deprecated, still required by the schema) gets
the combined word NFD derives from the same two settings.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from agent.nrt.zones import Zone
from agent.sources.kubelet import KubeletFiles
from common.node_resource_topology import (
    GROUP,
    KIND,
    POLICY_ATTRIBUTE,
    SCOPE_ATTRIBUTE,
    VERSION,
)

__all__ = [
    "NodeRef",
    "legacy_policy",
    "topology_body",
]

# (policy, scope) -> the deprecated v1alpha2 word, as NFD maps them.
_LEGACY = {
    ("single-numa-node", "container"): "SingleNUMANodeContainerLevel",
    ("single-numa-node", "pod"): "SingleNUMANodePodLevel",
    ("restricted", "container"): "RestrictedContainerLevel",
    ("restricted", "pod"): "RestrictedPodLevel",
    ("best-effort", "container"): "BestEffortContainerLevel",
    ("best-effort", "pod"): "BestEffortPodLevel",
}


@dataclass(frozen=True, slots=True)
class NodeRef:
    name: str
    uid: str


def legacy_policy(policy: str | None, scope: str | None) -> str:
    return _LEGACY.get((policy or "none", scope or "container"), "None")


def topology_body(node: NodeRef, zones: Sequence[Zone], kubelet: KubeletFiles) -> dict[str, Any]:
    """The whole object the agent writes; equal inputs give an equal body (no timestamps)."""
    attributes = [
        {"name": name, "value": value}
        for name, value in (
            (POLICY_ATTRIBUTE, kubelet.topology_manager_policy),
            (SCOPE_ATTRIBUTE, kubelet.topology_manager_scope),
        )
        if value
    ]
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": KIND,
        "metadata": {
            "name": node.name,
            "ownerReferences": [
                {"apiVersion": "v1", "kind": "Node", "name": node.name, "uid": node.uid}
            ],
        },
        "topologyPolicies": [
            legacy_policy(kubelet.topology_manager_policy, kubelet.topology_manager_scope)
        ],
        "attributes": attributes,
        "zones": [z.wire() for z in zones],
    }
