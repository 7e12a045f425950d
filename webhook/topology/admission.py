"""The kubelet's admission of one pod on one node, from whatever the caller knows of the node:
its labels, topology annotation and allocatable (an idle node), or its NodeResourceTopology
(the node now). Everything that models the kubelet's Topology Manager calls these."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from webhook.topology.kubelet import KubeletConfig, config_from_labels, config_from_zones
from webhook.topology.merge import Admission, admit
from webhook.topology.requests import Unit, aligned_units
from webhook.topology.shape import NumaShape, hardware_capacity, zones_capacity
from webhook.topology.zones import NodeZones

__all__ = ["PodUnits", "idle_refusal", "now_admission", "pod_units", "refusal_words"]


@dataclass(frozen=True, slots=True)
class PodUnits:
    """A pod's aligned units under each Topology Manager scope (the node decides which)."""

    pod: tuple[Unit, ...]
    container: tuple[Unit, ...]

    def under(self, scope: str) -> tuple[Unit, ...]:
        return self.pod if scope == "pod" else self.container


def pod_units(spec: Mapping[str, object]) -> PodUnits:
    return PodUnits(aligned_units(spec, "pod"), aligned_units(spec, "container"))


def refusal_words(config: KubeletConfig, reason: str) -> str:
    return (
        f"its kubelet would refuse it (TopologyAffinityError under topology-manager-policy "
        f"{config.policy}, scope {config.scope}): {reason}"
    )


def idle_refusal(labels: Mapping[str, str], shape: NumaShape | None,
                 allocatable: Mapping[str, int], units: PodUnits, *, gpu_resource: str,
                 rdma_resource: str) -> str | None:  # fmt: skip
    """Why this node's kubelet would refuse the pod on an idle node, or None."""
    config = config_from_labels(labels)
    if shape is None or not config.aligning:
        return None
    capacity = hardware_capacity(
        shape, allocatable, gpu_resource=gpu_resource, rdma_resource=rdma_resource
    )
    verdict = admit(config, capacity, units.under(config.scope))
    return None if verdict.admitted else refusal_words(config, verdict.reason or "")


def now_admission(zones: NodeZones, units: PodUnits,
                  labels: Mapping[str, str] | None = None) -> Admission:  # fmt: skip
    """Whether the kubelet admits the pod on what its NUMA nodes have free now. The node's
    labels, when known, name the managers; else the object's zones show them."""
    if labels is not None and labels:
        config = config_from_labels(labels)
    else:
        config = config_from_zones(
            zones.policy,
            zones.scope,
            cpu_reserved=zones.reserved("cpu"),
            memory_reserved=zones.reserved("memory"),
        )
    return admit(config, zones_capacity(zones), units.under(config.scope))
