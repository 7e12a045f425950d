"""The kubelet contract: the Topology Manager, CPU manager and memory manager settings that
decide whether a kubelet admits a pod on its NUMA nodes, their defaults, and the node labels
that carry them. The agent reads them from the kubelet's config files (agent/sources/
kubelet.py); the webhook's placement model reads them back from the labels
(webhook/placement_model/kubelet.py). Change a Topology Manager rule here and in the model, never a
copy (pkg/kubelet/cm/topologymanager, pkg/kubelet/apis/config/v1beta1/defaults.go).
"""

from __future__ import annotations

from common.vocabulary import Label

__all__ = [
    "ALIGNING_POLICIES",
    "CONFIG_DEFAULTS",
    "DEFAULT_MAX_NUMA_NODES",
    "KUBELET_LABELS",
    "OPTION_DEFAULTS",
    "SCOPES",
    "TOPOLOGY_MANAGER_POLICIES",
]

# topologyManagerPolicy values, in the order the kubelet documents them.
TOPOLOGY_MANAGER_POLICIES = ("none", "best-effort", "restricted", "single-numa-node")
# The policies that refuse a pod they cannot align (TopologyAffinityError): what a NUMA-aware
# scheduler and the kubelet-shape terms exist for. Under best-effort or none the pod starts.
ALIGNING_POLICIES = ("restricted", "single-numa-node")
SCOPES = ("container", "pod")  # topologyManagerScope; container is the default
# KubeletConfiguration field -> the kubelet's default when no file sets it.
CONFIG_DEFAULTS: dict[str, str] = {
    "cpuManagerPolicy": "none",
    "topologyManagerPolicy": "none",
    "topologyManagerScope": "container",
    "memoryManagerPolicy": "None",
}
# Past this many NUMA nodes the kubelet runs no aligning Topology Manager unless the option
# max-allowable-numa-nodes allows more (hint generation grows with 2^N).
DEFAULT_MAX_NUMA_NODES = 8
# topologyManagerPolicyOptions the kubelet knows (all GA) -> its default.
OPTION_DEFAULTS: dict[str, str] = {
    "prefer-closest-numa-nodes": "false",
    "max-allowable-numa-nodes": str(DEFAULT_MAX_NUMA_NODES),
}
# The node labels the agent writes from the kubelet's config (absent when it could not read
# it): everything the placement model needs to know of a node's kubelet.
KUBELET_LABELS = (
    Label.TOPOLOGY_MANAGER_POLICY,
    Label.TOPOLOGY_MANAGER_SCOPE,
    Label.CPU_MANAGER_POLICY,
    Label.MEMORY_MANAGER_POLICY,
    Label.TOPOLOGY_MANAGER_MAX_NUMA_NODES,
    Label.TOPOLOGY_MANAGER_PREFER_CLOSEST,
)
