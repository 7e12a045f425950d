"""Which containers are training workers, and how many GPUs, CPUs and memory a container or
pod asks for."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from decimal import Decimal
from typing import Any, NamedTuple

from webhook.policy.quantity import QuantityError, ceil_int, parse_quantity

__all__ = [
    "NumaRequest",
    "all_containers",
    "amount",
    "container_gpus",
    "guaranteed_amounts",
    "is_sidecar",
    "numa_request",
    "pod_gpus",
    "select_workers",
]


def amount(value: Any) -> Decimal | None:
    """A resource amount, or None when absent or not a quantity."""
    if value is None:
        return None
    try:
        return parse_quantity(value)
    except QuantityError:
        return None


def container_gpus(container: dict[str, Any], resource: str) -> int:
    """GPUs a container asks for: its limit, else its request (extended resources need both)."""
    resources = container.get("resources") or {}
    value = (resources.get("limits") or {}).get(resource)
    if value is None:
        value = (resources.get("requests") or {}).get(resource)
    found = amount(value)
    return ceil_int(found) if found is not None and found > 0 else 0


def is_sidecar(container: dict[str, Any]) -> bool:
    """A native sidecar: an init container that keeps running beside the app containers."""
    return container.get("restartPolicy") == "Always"


def pod_gpus(spec: dict[str, Any], resource: str) -> int:
    """GPUs the scheduler reserves for the pod: app + sidecar sum, or the largest init step."""
    running = sum(container_gpus(c, resource) for c in spec.get("containers") or [])
    largest_init = 0
    for init in spec.get("initContainers") or []:
        gpus = container_gpus(init, resource)
        if is_sidecar(init):
            running += gpus
        else:
            largest_init = max(largest_init, gpus)
    return max(running, largest_init)


class NumaRequest(NamedTuple):
    """What the kubelet must place on one NUMA node under single-numa-node alignment."""

    cpus: int  # exclusive CPUs: whole-CPU containers of a Guaranteed pod
    memory_gib: int  # the Guaranteed pod's memory, GiB rounded up


_GIB = Decimal(2**30)


def numa_request(spec: dict[str, Any]) -> NumaRequest:
    """The pod-wide amounts the static CPU and memory managers align (topology scope pod).

    Like kube-scheduler's pod request: app containers and sidecars add up, an init container
    needs itself plus the sidecars started before it, and the larger of the two counts. Only
    a Guaranteed pod is aligned at all, and only its whole-CPU containers get exclusive CPUs,
    so anything else counts 0."""
    inits: list[tuple[bool, Decimal, Decimal]] = []
    apps: list[tuple[bool, Decimal, Decimal]] = []
    for key, into in (("initContainers", inits), ("containers", apps)):
        for container in spec.get(key) or []:
            found = guaranteed_amounts(container)
            if found is None:
                return NumaRequest(0, 0)
            cpu, memory = found
            whole = cpu if cpu == cpu.to_integral_value() else Decimal(0)
            into.append((is_sidecar(container), whole, memory))
    cpus = _pod_total([(s, c) for s, c, _ in inits], [c for _, c, _ in apps])
    memory = _pod_total([(s, m) for s, _, m in inits], [m for _, _, m in apps])
    return NumaRequest(ceil_int(cpus), ceil_int(memory / _GIB))


def guaranteed_amounts(container: Any) -> tuple[Decimal, Decimal] | None:
    """(cpu, memory bytes) when the container is Guaranteed: both limited, requests equal."""
    resources = container.get("resources") if isinstance(container, dict) else None
    if not isinstance(resources, dict):
        return None
    limits, requests = resources.get("limits") or {}, resources.get("requests") or {}
    if not isinstance(limits, dict) or not isinstance(requests, dict):
        return None
    found: list[Decimal] = []
    for name in ("cpu", "memory"):
        limit = amount(limits.get(name))
        request = amount(requests.get(name, limits.get(name)))
        if limit is None or limit <= 0 or request != limit:
            return None
        found.append(limit)
    return found[0], found[1]


def _pod_total(inits: Sequence[tuple[bool, Decimal]], apps: Sequence[Decimal]) -> Decimal:
    """(is sidecar, amount) of each init container and the app containers' amounts, summed
    as the scheduler does."""
    sidecars = Decimal(0)
    largest_init = Decimal(0)
    for sidecar, value in inits:
        if sidecar:
            sidecars += value
        else:
            largest_init = max(largest_init, sidecars + value)
    return max(sum(apps, Decimal(0)) + sidecars, largest_init)


def all_containers(spec: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """Init (including sidecar) containers first, then app containers."""
    yield from spec.get("initContainers") or []
    yield from spec.get("containers") or []


def select_workers(
    spec: dict[str, Any], *, names: list[str] | None, resource: str, warnings: list[str]
) -> list[dict[str, Any]]:
    """App containers named by the policy, else every app container with a GPU limit."""
    containers = spec.get("containers") or []
    if names is None:
        return [c for c in containers if container_gpus(c, resource) > 0]
    by_name = {c.get("name"): c for c in containers}
    missing = [n for n in names if n not in by_name]
    if missing:
        warnings.append(
            f"policy names worker container(s) {', '.join(missing)} that the pod does not have"
        )
    return [by_name[n] for n in names if n in by_name]
