"""The kubelet settings that decide its NUMA admission, read from the agent's node labels or
from a NodeResourceTopology's attributes, with what the model does not know said in words.

Policies and options follow the kubelet's: Topology Manager policy `none` (default),
`best-effort`, `restricted`, `single-numa-node`; scope `container` (default) or `pod`;
options `prefer-closest-numa-nodes` (which of several equally narrow NUMA sets is chosen,
never whether the pod is admitted) and `max-allowable-numa-nodes` (default 8: a kubelet with
an aligning policy on a machine with more NUMA nodes, those without CPUs included, does not
start at all). A policy
or option value the model does not know is treated as not aligning, and `unknown` says so.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace

from common.kubelet_contract import (
    ALIGNING_POLICIES,
    DEFAULT_MAX_NUMA_NODES,
    SCOPES,
    TOPOLOGY_MANAGER_POLICIES,
)
from common.vocabulary import Label

__all__ = ["KubeletConfig", "config_from_labels", "config_from_zones"]

_POLICIES = frozenset(TOPOLOGY_MANAGER_POLICIES)
_SCOPES = frozenset(SCOPES)
_DEFAULT_MAX_NUMA = DEFAULT_MAX_NUMA_NODES


@dataclass(frozen=True, slots=True)
class KubeletConfig:
    policy: str  # the Topology Manager policy ("none" when unknown or not aligning)
    scope: str  # "container" or "pod"
    static_cpu: bool  # CPU manager `static`: integer CPUs of a Guaranteed pod get hints
    static_memory: bool  # memory manager `Static`: a Guaranteed pod's memory gets hints
    max_numa_nodes: int = _DEFAULT_MAX_NUMA
    prefer_closest: bool = False
    unknown: str | None = None  # what the model does not know, in words (then not aligning)

    @property
    def aligning(self) -> bool:
        return self.policy in ALIGNING_POLICIES


def _unknown(policy: str | None, scope: str | None, max_numa: str | None,
             closest: str | None) -> str | None:  # fmt: skip
    if policy is not None and policy not in _POLICIES:
        return f"topology-manager-policy {policy} is not one Topoplace models"
    if scope is not None and scope not in _SCOPES:
        return f"topology-manager-scope {scope} is not one Topoplace models"
    if max_numa is not None and not (max_numa.isdigit() and int(max_numa) >= 1):
        return f"topology-manager-max-allowable-numa-nodes {max_numa} is not a count"
    if closest is not None and closest not in ("true", "false"):
        return f"topology-manager-prefer-closest-numa-nodes {closest} is not true or false"
    return None


def _config(policy: str | None, scope: str | None, *, static_cpu: bool, static_memory: bool,
            max_numa: str | None = None, closest: str | None = None) -> KubeletConfig:  # fmt: skip
    unknown = _unknown(policy, scope, max_numa, closest)
    if unknown is not None:
        # Not aligning: the model says nothing it cannot stand behind.
        return KubeletConfig("none", "container", static_cpu, static_memory, unknown=unknown)
    return KubeletConfig(
        policy=policy or "none",
        scope=scope or "container",
        static_cpu=static_cpu,
        static_memory=static_memory,
        max_numa_nodes=int(max_numa) if max_numa else _DEFAULT_MAX_NUMA,
        prefer_closest=closest == "true",
    )


def config_from_labels(labels: Mapping[str, str]) -> KubeletConfig:
    """From the agent's labels (the kubelet's config files, merged as the kubelet merges)."""
    return _config(
        labels.get(Label.TOPOLOGY_MANAGER_POLICY),
        labels.get(Label.TOPOLOGY_MANAGER_SCOPE),
        static_cpu=labels.get(Label.CPU_MANAGER_POLICY) == "static",
        static_memory=labels.get(Label.MEMORY_MANAGER_POLICY) == "Static",
        max_numa=labels.get(Label.TOPOLOGY_MANAGER_MAX_NUMA_NODES),
        closest=labels.get(Label.TOPOLOGY_MANAGER_PREFER_CLOSEST),
    )


def config_from_zones(policy: str | None, scope: str, *, cpu_reserved: bool,
                      memory_reserved: bool, numa_nodes: int = 0) -> KubeletConfig:  # fmt: skip
    """From a NodeResourceTopology alone (the extender has nothing else). Its attributes name
    the policy and scope; the managers show in the zones: the static CPU manager needs a CPU
    reservation and hands out only the rest (allocatable < capacity), the Static memory
    manager likewise needs reserved memory; with `none`/`None` allocatable is the capacity.
    A kubelet whose zones are published is running, so its max-allowable-numa-nodes admits
    its `numa_nodes` zones (a GB200 tray's 34 NUMA nodes, seen on make cluster)."""
    config = _config(policy, scope, static_cpu=cpu_reserved, static_memory=memory_reserved)
    return replace(config, max_numa_nodes=max(config.max_numa_nodes, numa_nodes))
