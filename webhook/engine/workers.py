"""Which containers are training workers, and how many GPUs a container or pod asks for."""

from __future__ import annotations

from collections.abc import Iterator
from decimal import Decimal
from typing import Any

from webhook.policy.quantity import QuantityError, ceil_int, parse_quantity

__all__ = [
    "all_containers",
    "amount",
    "container_gpus",
    "is_sidecar",
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
