"""NodeResourceTopology (topology.node.k8s.io/v1alpha2) objects as frozen records.

One `NodeZones` per node: its NUMA zones (type `Node`) with what each has available now, and
the kubelet's topology policy and scope from the object's attributes, as NFD's
topology-updater and Topoplace's agent write them. Anything malformed raises ZoneError with
the field that was wrong; the caches skip such an object and log it.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from decimal import Decimal
from typing import Any

from common.node_resource_topology import (
    POLICY_ATTRIBUTE,
    REMOTE_ACCESS_ATTRIBUTE,
    SCOPE_ATTRIBUTE,
)
from webhook.policy.quantity import QuantityError, parse_quantity

__all__ = [
    "NodeZones",
    "Zone",
    "ZoneError",
    "shared",
    "zone_counts",
    "zones_from_object",
    "zones_of_documents",
]


class ZoneError(ValueError):
    """A NodeResourceTopology object that does not have the v1alpha2 shape."""


@dataclass(frozen=True, slots=True)
class Zone:
    """One NUMA node: resource name -> available now, allocatable (what the kubelet may hand
    out there) and capacity (the hardware; allocatable where the object leaves it out)."""

    name: str
    available: Mapping[str, Decimal]
    allocatable: Mapping[str, Decimal]
    capacity: Mapping[str, Decimal] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class NodeZones:
    node: str
    zones: tuple[Zone, ...]
    policy: str | None  # the kubelet's topologyManagerPolicy, when the object says
    scope: str  # "container" (the kubelet's default) or "pod"
    # The highest recent remote-access percent of its zones (the agent's zone attribute);
    # None where no zone has one. Not part of what makes zones alike: counts only.
    remote_access_percent: int | None = None

    def free(self, resource: str) -> tuple[Decimal, ...]:
        """Available `resource` per zone, in zone order."""
        return tuple(z.available.get(resource, Decimal(0)) for z in self.zones)

    def reserved(self, resource: str) -> bool:
        """The kubelet keeps some of `resource` back in a zone (allocatable < capacity)."""
        return any(
            z.allocatable.get(resource, Decimal(0)) < z.capacity.get(resource, Decimal(0))
            for z in self.zones
        )


def _resources(zone: Mapping[str, Any], where: str) -> tuple[dict[str, Decimal], ...]:
    available: dict[str, Decimal] = {}
    allocatable: dict[str, Decimal] = {}
    capacity: dict[str, Decimal] = {}
    for i, item in enumerate(zone.get("resources") or ()):
        if not isinstance(item, Mapping) or not isinstance(item.get("name"), str):
            raise ZoneError(f"{where}.resources[{i}]: needs a name")
        try:
            available[item["name"]] = parse_quantity(item.get("available", 0))
            allocatable[item["name"]] = parse_quantity(item.get("allocatable", 0))
            hardware = item.get("capacity", item.get("allocatable", 0))
            capacity[item["name"]] = parse_quantity(hardware)
        except QuantityError as exc:
            raise ZoneError(f"{where}.resources[{i}]: {exc}") from None
    return available, allocatable, capacity


def _attributes(obj: Mapping[str, Any]) -> dict[str, str]:
    found: dict[str, str] = {}
    for item in obj.get("attributes") or ():
        if isinstance(item, Mapping) and isinstance(item.get("name"), str):
            found[item["name"]] = str(item.get("value", ""))
    return found


def zones_from_object(obj: Mapping[str, Any]) -> NodeZones:
    """The NUMA zones of one NodeResourceTopology (its name is the node's)."""
    name = (obj.get("metadata") or {}).get("name")
    if not isinstance(name, str) or not name:
        raise ZoneError("metadata.name: missing")
    zones = []
    remote: list[int] = []
    for i, zone in enumerate(obj.get("zones") or ()):
        if not isinstance(zone, Mapping):
            raise ZoneError(f"{name}: zones[{i}] is not an object")
        if zone.get("type") != "Node":
            continue  # sockets, cores, caches: only NUMA nodes hold devices
        available, allocatable, capacity = _resources(zone, f"{name}: zones[{i}]")
        zones.append(Zone(str(zone.get("name") or i), available, allocatable, capacity))
        percent = _percent(_attributes(zone).get(REMOTE_ACCESS_ATTRIBUTE))
        if percent is not None:
            remote.append(percent)
    attributes = _attributes(obj)
    return NodeZones(
        node=name,
        zones=tuple(sorted(zones, key=lambda z: _zone_order(z.name))),
        policy=attributes.get(POLICY_ATTRIBUTE),
        scope=attributes.get(SCOPE_ATTRIBUTE) or "container",
        remote_access_percent=max(remote, default=None),
    )


def _percent(value: str | None) -> int | None:
    """A whole percent 0..100; anything else is no figure (an optional hint, never a reason
    to drop the node's zones)."""
    if value is None or not value.isdigit() or int(value) > 100:
        return None
    return int(value)


def _zone_order(name: str) -> tuple[int, str]:
    # node-10 after node-9
    tail = name.rsplit("-", 1)[-1]
    return (int(tail), name) if tail.isdigit() else (1 << 30, name)


def zone_counts(zones: tuple[Zone, ...]) -> Hashable:
    """What makes two nodes' zones alike: every zone's name and counts."""
    return tuple(
        (z.name, *(tuple(sorted(m.items())) for m in (z.available, z.allocatable, z.capacity)))
        for z in zones
    )


def shared(zones: NodeZones, alike: dict[Hashable, tuple[Zone, ...]]) -> NodeZones:
    """`zones` holding the one tuple in `alike` of nodes with the same counts (added when
    new): alike nodes share a record, and a caller may judge each shared tuple once."""
    same = alike.setdefault(zone_counts(zones.zones), zones.zones)
    return zones if same is zones.zones else replace(zones, zones=same)


def zones_of_documents(docs: Iterable[Mapping[str, Any]]) -> dict[str, NodeZones]:
    """The NodeResourceTopology objects among `docs`, by node (ZoneError on a bad one);
    alike nodes share one zones tuple."""
    found = {}
    alike: dict[Hashable, tuple[Zone, ...]] = {}
    for doc in docs:
        if doc.get("kind", "NodeResourceTopology") == "NodeResourceTopology":
            zones = shared(zones_from_object(doc), alike)
            found[zones.node] = zones
    return found
