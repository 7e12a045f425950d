"""Which containers of a pod are its training workers."""

from __future__ import annotations

from typing import Any

from webhook.topology.requests import container_gpus

__all__ = ["select_workers"]


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
