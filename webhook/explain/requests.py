"""What a pod asks of a node and what a node offers, in the units the scheduler compares.

Pod requests follow k8s.io/component-helpers/resource PodRequests: app containers and native
sidecars (restartable init containers) add up; each ordinary init container needs itself
plus the sidecars started before it; the pod needs the larger of the two, per resource; then
pod-level requests (cpu, memory, hugepages) replace the container sum, and `overhead` adds.
A container's limit stands in for a request it does not set (the API server's defaulting).
Units: cpu in millicores, everything else in whole units, both rounded up as
Quantity.MilliValue()/Value() round. Resources the scheduler does not check (names without a
'/' other than cpu, memory, ephemeral-storage, pods, hugepages-*) are dropped.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Mapping
from decimal import Decimal
from typing import Any

from webhook.engine.workers import all_containers, guaranteed_amounts
from webhook.policy.quantity import QuantityError, ceil_int, parse_quantity

__all__ = [
    "NATIVE",
    "Amounts",
    "checked_resource",
    "format_amount",
    "node_allocatable",
    "pod_requests",
]

Amounts = dict[str, int]
NATIVE = ("cpu", "memory", "ephemeral-storage", "pods")


def checked_resource(name: str) -> bool:
    """A resource NodeResourcesFit compares: native ones, hugepages, and any prefixed name."""
    return name in NATIVE or name.startswith(("hugepages-", "attachable-volumes-")) or "/" in name


def _units(name: str, value: Any) -> int | None:
    if isinstance(value, str | int) and not isinstance(value, bool):
        return _cached_units(name, value)
    return _convert(name, value)


@functools.lru_cache(maxsize=4096)
def _cached_units(name: str, value: str | int) -> int | None:
    # The same few quantities ("96Gi", 8) recur on every pod of a policy and every node.
    return _convert(name, value)


def _convert(name: str, value: Any) -> int | None:
    try:
        amount = parse_quantity(value)
    except QuantityError:
        return None
    return ceil_int(amount * 1000) if name == "cpu" else ceil_int(amount)


def _amounts(raw: Any) -> Amounts:
    out: Amounts = {}
    if isinstance(raw, dict):
        for name, value in raw.items():
            if isinstance(name, str) and checked_resource(name):
                units = _units(name, value)
                if units is not None:
                    out[name] = units
    return out


def _container_requests(container: Any) -> Amounts:
    resources = container.get("resources") if isinstance(container, dict) else None
    if not isinstance(resources, dict):
        return {}
    return {**_amounts(resources.get("limits")), **_amounts(resources.get("requests"))}


def _add(into: Amounts, more: Mapping[str, int]) -> None:
    for name, value in more.items():
        into[name] = into.get(name, 0) + value


def _max(into: Amounts, other: Mapping[str, int]) -> None:
    for name, value in other.items():
        if value > into.get(name, 0):
            into[name] = value


def _list(spec: Mapping[str, Any], key: str) -> Iterable[Any]:
    value = spec.get(key)
    return value if isinstance(value, list) else ()


def pod_requests(spec: Mapping[str, Any]) -> Amounts:
    """Total requests of a pod spec as the scheduler computes them (zero amounts dropped)."""
    total: Amounts = {}
    for container in _list(spec, "containers"):
        _add(total, _container_requests(container))
    sidecars: Amounts = {}
    init_peak: Amounts = {}
    for container in _list(spec, "initContainers"):
        own = _container_requests(container)
        if isinstance(container, dict) and container.get("restartPolicy") == "Always":
            _add(total, own)
            _add(sidecars, own)
            _max(init_peak, sidecars)
        else:
            step = dict(own)
            _add(step, sidecars)
            _max(init_peak, step)
    _max(total, init_peak)
    pod_level = spec.get("resources")
    if isinstance(pod_level, dict):
        level = {**_amounts(pod_level.get("limits")), **_amounts(pod_level.get("requests"))}
        for name, value in level.items():
            if name in ("cpu", "memory") or name.startswith("hugepages-"):
                total[name] = value
    _add(total, _amounts(spec.get("overhead")))
    return {name: value for name, value in total.items() if value > 0}


def container_requests(spec: Mapping[str, Any]) -> tuple[Amounts, ...]:
    """Each container's own requests (init containers too): what scope container aligns."""
    containers = [*_list(spec, "initContainers"), *_list(spec, "containers")]
    return tuple(r for r in (_container_requests(c) for c in containers) if r)


def guaranteed(spec: Mapping[str, Any]) -> bool:
    """Guaranteed QoS, as the engine decides it: every container limits cpu and memory, with
    requests equal if set."""
    containers = all_containers(spec)  # type: ignore[arg-type]
    return all(guaranteed_amounts(c) is not None for c in containers)


def node_allocatable(status: Mapping[str, Any]) -> Amounts:
    return _amounts(status.get("allocatable"))


def format_amount(name: str, units: int) -> str:
    """An amount in the units users write: cores, binary bytes where exact, else plain."""
    if name == "cpu":
        return str(units // 1000) if units % 1000 == 0 else f"{units}m"
    if name == "memory" or name == "ephemeral-storage" or name.startswith("hugepages-"):
        for suffix, power in (("Ti", 4), ("Gi", 3), ("Mi", 2), ("Ki", 1)):
            size = 1024**power
            if units >= size and units % size == 0:
                return f"{units // size}{suffix}"
    return str(Decimal(units))
