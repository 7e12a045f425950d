"""What a pod asks of a node, summed once: for kube-scheduler's fit and the kubelet's NUMA
alignment alike.

Pod requests follow k8s.io/component-helpers/resource PodRequests: app containers and native
sidecars (restartable init containers) add up; each ordinary init container needs itself
plus the sidecars started before it; the pod needs the larger of the two, per resource; then
pod-level requests (cpu, memory, hugepages) replace the container sum, and `overhead` adds.
A container's limit stands in for a request it does not set, and a pod-level limit for a
pod-level request only where no container asks for that resource (the API server's
defaulting).
Units: cpu in millicores, everything else in whole units, both rounded up as
Quantity.MilliValue()/Value() round. Resources the scheduler does not check (names without a
'/' other than cpu, memory, ephemeral-storage, pods, hugepages-*) are dropped.

What the kubelet *aligns* is narrower (`aligned_units`): the static CPU manager gives hints
only for a Guaranteed pod's integer-CPU containers (a fractional one counts 0, the others
still count), and neither it nor the Static memory manager for a pod with pod-level
resources; the memory manager only for a Guaranteed pod; devices always.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from webhook.policy.quantity import QuantityError, ceil_int, parse_quantity

__all__ = [
    "NATIVE",
    "Amounts",
    "Unit",
    "aligned_units",
    "all_containers",
    "amount",
    "checked_resource",
    "container_gpus",
    "format_amount",
    "guaranteed",
    "is_sidecar",
    "node_allocatable",
    "pod_gpus",
    "pod_requests",
]

Amounts = dict[str, int]
NATIVE = ("cpu", "memory", "ephemeral-storage", "pods")


@dataclass(frozen=True, slots=True)
class Unit:
    """What the Topology Manager aligns at once: a pod (scope pod) or one container."""

    amounts: Mapping[str, int]
    keeps: bool = True  # False: an ordinary init container, whose resources come back
    # Units key the caches of what they lead to (terms, verdicts): hashed once.
    _hash: int = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_hash", hash((frozenset(self.amounts.items()), self.keeps)))

    def __hash__(self) -> int:
        return self._hash


def amount(value: Any) -> Decimal | None:
    """A resource amount, or None when absent or not a quantity."""
    if value is None:
        return None
    try:
        return parse_quantity(value)
    except QuantityError:
        return None


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


_INT64_MAX = 2**63 - 1
_INT64_LIMIT = Decimal(_INT64_MAX)


def _convert(name: str, value: Any) -> int | None:
    try:
        found = parse_quantity(value)
    except QuantityError:
        return None
    if not found.is_finite():
        return None
    scaled = found * 1000 if name == "cpu" else found
    # Held to int64 as the API server's Quantity values are: a bigger number (1e999999)
    # would cost megabytes as an int and says nothing more (the engine's bounds refuse
    # such pods before any of this).
    return _INT64_MAX if scaled > _INT64_LIMIT else ceil_int(scaled)


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


def is_sidecar(container: Any) -> bool:
    """A native sidecar: an init container that keeps running beside the app containers."""
    return isinstance(container, dict) and container.get("restartPolicy") == "Always"


def _pod_sum(spec: Mapping[str, Any], each: Any) -> Amounts:
    """`each(container)` summed over a pod as the scheduler and the kubelet sum requests."""
    total: Amounts = {}
    for container in _list(spec, "containers"):
        _add(total, each(container))
    sidecars: Amounts = {}
    init_peak: Amounts = {}
    for container in _list(spec, "initContainers"):
        own = each(container)
        if is_sidecar(container):
            _add(total, own)
            _add(sidecars, own)
            _max(init_peak, sidecars)
        else:
            step = dict(own)
            _add(step, sidecars)
            _max(init_peak, step)
    _max(total, init_peak)
    return total


def _supported(found: Amounts) -> Amounts:
    return {n: v for n, v in found.items() if n in ("cpu", "memory") or n.startswith("hugepages-")}


def _pod_level_parts(spec: Mapping[str, Any]) -> tuple[Amounts, Amounts]:
    """Pod-level (limits, requests), of the resources pod-level resources support."""
    level = spec.get("resources")
    if not isinstance(level, dict):
        return {}, {}
    return _supported(_amounts(level.get("limits"))), _supported(_amounts(level.get("requests")))


def _pod_level(spec: Mapping[str, Any]) -> Amounts:
    """Whatever pod-level resources set (IsPodLevelResourcesSet: limits count too)."""
    limits, requests = _pod_level_parts(spec)
    return {**limits, **requests}


def _pod_level_requests(spec: Mapping[str, Any], containers: Mapping[str, int]) -> Amounts:
    """Pod-level requests as the API server defaults them (KEP-2837): a resource with only a
    pod-level limit takes the containers' own requests when any container asks for it, else
    the limit; hugepages always the limit (they are never overcommitted)."""
    limits, requests = _pod_level_parts(spec)
    for name, limit in limits.items():
        if name not in requests and (name.startswith("hugepages-") or name not in containers):
            requests[name] = limit
    return requests


def pod_requests(spec: Mapping[str, Any]) -> Amounts:
    """Total requests of a pod spec as the scheduler computes them (zero amounts dropped)."""
    total = _pod_sum(spec, _container_requests)
    total.update(_pod_level_requests(spec, total))
    _add(total, _amounts(spec.get("overhead")))
    return {name: value for name, value in total.items() if value > 0}


def all_containers(spec: Mapping[str, Any]) -> Iterator[Any]:
    """Init (including sidecar) containers first, then app containers: the kubelet's order."""
    yield from _list(spec, "initContainers")
    yield from _list(spec, "containers")


def guaranteed(spec: Mapping[str, Any]) -> bool:
    """Guaranteed QoS: every container limits cpu and memory, with requests equal if set."""
    containers = list(all_containers(spec))
    return bool(containers) and all(_is_guaranteed(*_limits_requests(c)) for c in containers)


def _limits_requests(container: Any) -> tuple[Amounts, Amounts]:
    resources = container.get("resources") if isinstance(container, dict) else None
    if not isinstance(resources, dict):
        return {}, {}
    return _amounts(resources.get("limits")), _amounts(resources.get("requests"))


def _is_guaranteed(limits: Amounts, requests: Amounts) -> bool:
    return all(
        limits.get(n, 0) > 0 and requests.get(n, limits[n]) == limits[n] for n in ("cpu", "memory")
    )


def _aligned(limits: Amounts, requests: Amounts, *, exclusive: bool) -> Amounts:
    """What one container asks the kubelet's hint providers to align (see the module doc)."""
    own = {**limits, **requests}
    out = {n: v for n, v in own.items() if "/" in n and v > 0}
    if exclusive:
        cpu = own.get("cpu", 0)
        if cpu % 1000 == 0 and cpu > 0:
            out["cpu"] = cpu
        for name, value in own.items():
            if (name == "memory" or name.startswith("hugepages-")) and value > 0:
                out[name] = value
    return out


def aligned_units(spec: Mapping[str, Any]) -> tuple[tuple[Unit, ...], tuple[Unit, ...]]:
    """What the Topology Manager aligns together, under scope `pod` (the whole pod, one unit)
    and under scope `container` (each container in the kubelet's order; ordinary init
    containers too: their resources return to the pod before the app containers start).
    Each container's resources are read once (every admission of a policy pod runs this)."""
    read = [
        (key, c, *_limits_requests(c))
        for key in ("initContainers", "containers")
        for c in _list(spec, key)
    ]
    exclusive = (
        bool(read) and all(_is_guaranteed(lim, req) for *_, lim, req in read)
        and not _pod_level(spec)
    )  # fmt: skip
    own: dict[int, Amounts] = {}
    units = []
    for key, container, limits, requests in read:
        found = own[id(container)] = _aligned(limits, requests, exclusive=exclusive)
        if found:
            units.append(Unit(found, keeps=key == "containers" or is_sidecar(container)))
    total = _pod_sum(spec, lambda c: own[id(c)])
    return ((Unit(total),) if total else ()), tuple(units)


def container_gpus(container: Mapping[str, Any], resource: str) -> int:
    """GPUs a container asks for: its limit, else its request (extended resources need both)."""
    resources = container.get("resources") or {}
    value = (resources.get("limits") or {}).get(resource)
    if value is None:
        value = (resources.get("requests") or {}).get(resource)
    found = amount(value)
    return ceil_int(found) if found is not None and found > 0 else 0


def pod_gpus(spec: Mapping[str, Any], resource: str) -> int:
    """GPUs the scheduler reserves for the pod: app + sidecar sum, or the largest init step."""
    return _pod_sum(spec, lambda c: {resource: container_gpus(c, resource)}).get(resource, 0)


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
