"""The kubelet's admission of one pod on one node, from whatever the caller knows of the node:
its labels, topology annotation and allocatable (an idle node), or its NodeResourceTopology
(the node now). Everything that models the kubelet's Topology Manager calls these."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from webhook.placement_model.kubelet import KubeletConfig, config_from_labels, config_from_zones
from webhook.placement_model.merge import Admission, admit
from webhook.placement_model.numa_shape import NumaShape, hardware_capacity, zones_capacity
from webhook.placement_model.requests import Unit, aligned_units
from webhook.placement_model.zones import NodeZones

__all__ = ["PodUnits", "idle_refusal", "now_admission", "pod_units", "refusal_words"]


@dataclass(frozen=True, slots=True)
class PodUnits:
    """A pod's aligned units under each Topology Manager scope (the node decides which)."""

    pod: tuple[Unit, ...]
    container: tuple[Unit, ...]

    def under(self, scope: str) -> tuple[Unit, ...]:
        return self.pod if scope == "pod" else self.container


def pod_units(spec: Mapping[str, Any]) -> PodUnits:
    """The pod's aligned units. Pods of one policy and size repeat the same resources (the
    engine wrote them), so the answer is kept per resources, read without parsing."""
    try:
        key = _resources_key(spec)
        hash(key)
    except (TypeError, AttributeError):
        return PodUnits(*aligned_units(spec))  # odd shapes: computed, not kept
    return _units_of(key, spec)


def _resources_key(spec: Mapping[str, Any]) -> tuple[object, ...]:
    out: list[object] = [_frozen(spec.get("resources"))]
    for field in ("initContainers", "containers"):
        for c in spec.get(field) or ():
            resources = c.get("resources") or {}
            out.append((field, c.get("restartPolicy"), _frozen(resources.get("limits")),
                        _frozen(resources.get("requests"))))  # fmt: skip
    return tuple(out)


def _frozen(amounts: Any) -> object:
    return tuple(amounts.items()) if isinstance(amounts, dict) else amounts


_UNITS: dict[tuple[object, ...], PodUnits] = {}


def _units_of(key: tuple[object, ...], spec: Mapping[str, Any]) -> PodUnits:
    found = _UNITS.get(key)
    if found is None:
        if len(_UNITS) >= 4096:
            _UNITS.clear()  # many shapes seen: start over
        found = _UNITS[key] = PodUnits(*aligned_units(spec))
    return found


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
            numa_nodes=len(zones.zones),
        )
    return admit(config, zones_capacity(zones), units.under(config.scope))
