"""The pod-shape checks the mutation engine runs before any step edits the pod.

The API server always sends typed objects; offline files and fuzzers may not. Every field a
step reads or edits is checked here for its JSON type, so a wrong type becomes an
`InvalidPod` naming the field path (HTTP 400, exit 2 offline) instead of a crash mid-step.
"""

from __future__ import annotations

from typing import Any

__all__ = ["InvalidPod", "check_spec", "mapping"]


class InvalidPod(ValueError):
    """The object is not shaped like a Pod (or pod template); the server answers 400."""


def check_spec(spec: Any) -> None:
    """Raise InvalidPod unless `spec` is a pod spec whose edited fields have their types."""
    if not isinstance(spec, dict):
        raise InvalidPod("spec must be an object holding the pod's containers")
    if not spec.get("containers"):
        # The API server refuses such a pod anyway; a patch for it would be placement for
        # nothing (and a GPU count of zero).
        raise InvalidPod("spec.containers must hold at least one container")
    for key in ("containers", "initContainers"):
        _containers(spec.get(key), f"spec.{key}")
    _affinity_fields(spec)


def mapping(value: Any, where: str) -> dict[str, Any]:
    """`value` as an object, {} when absent; InvalidPod naming `where` otherwise."""
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise InvalidPod(f"{where} must be an object, got {type(value).__name__}")
    return value


def _containers(value: Any, where: str) -> None:
    if value is None:
        return
    if not isinstance(value, list) or not all(isinstance(c, dict) for c in value):
        raise InvalidPod(f"{where} must be a list of container objects")
    for i, container in enumerate(value):
        _container_fields(container, f"{where}[{i}]")


def _objects(value: Any, where: str) -> list[Any]:
    if value is None:
        return []
    if not isinstance(value, list) or not all(isinstance(x, dict) for x in value):
        raise InvalidPod(f"{where} must be a list of objects")
    return value


def _affinity_fields(spec: dict[str, Any]) -> None:
    """The node affinity levels the affinity step edits must be objects and lists of them."""
    affinity = mapping(spec.get("affinity"), "spec.affinity")
    node = mapping(affinity.get("nodeAffinity"), "spec.affinity.nodeAffinity")
    where = "spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution"
    required = mapping(node.get("requiredDuringSchedulingIgnoredDuringExecution"), where)
    for i, term in enumerate(
        _objects(required.get("nodeSelectorTerms"), where + ".nodeSelectorTerms")
    ):
        _objects(term.get("matchExpressions"), f"{where}.nodeSelectorTerms[{i}].matchExpressions")
    _objects(
        node.get("preferredDuringSchedulingIgnoredDuringExecution"),
        "spec.affinity.nodeAffinity.preferredDuringSchedulingIgnoredDuringExecution",
    )


# Container fields the steps read or edit, and the JSON type each must have.
_LIST_OF_STR = ("command", "args")
_LIST_OF_OBJ = ("env", "volumeMounts")


def _container_fields(container: dict[str, Any], where: str) -> None:
    if not isinstance(container.get("name", ""), str):
        raise InvalidPod(f"{where}.name must be a string")
    for key in _LIST_OF_STR:
        items = container.get(key)
        if items is not None and (
            not isinstance(items, list) or not all(isinstance(x, str) for x in items)
        ):
            raise InvalidPod(f"{where}.{key} must be a list of strings")
    for key in _LIST_OF_OBJ:
        items = container.get(key)
        if items is not None and (
            not isinstance(items, list) or not all(isinstance(x, dict) for x in items)
        ):
            raise InvalidPod(f"{where}.{key} must be a list of objects")
    resources = mapping(container.get("resources"), f"{where}.resources")
    for key in ("requests", "limits"):
        amounts = mapping(resources.get(key), f"{where}.resources.{key}")
        if not all(isinstance(v, str | int | float) for v in amounts.values()):
            raise InvalidPod(f"{where}.resources.{key} values must be quantities")
