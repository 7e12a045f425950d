"""The pod-shape checks the mutation engine runs before any step edits the pod.

The API server always sends typed objects; offline files and fuzzers may not. Every field a
step reads or edits is checked here for its JSON type, so a wrong type becomes an
`InvalidPod` naming the field path (HTTP 400, exit 2 offline) instead of a crash mid-step.
"""

from __future__ import annotations

from collections.abc import Mapping
from decimal import Decimal
from typing import Any, TypedDict, cast

from webhook.placement_model.requests import container_gpus
from webhook.policy.bounds import MAX_CPUS, MAX_DEVICES, MAX_MEMORY
from webhook.policy.quantity import QuantityError, parse_quantity

__all__ = [
    "MAX_BYTES",
    "MAX_CONTAINERS",
    "MAX_CPU_CORES",
    "MAX_DEVICES",
    "MAX_EXPRESSIONS",
    "MAX_TERMS",
    "Container",
    "InvalidPod",
    "PodSpec",
    "ResourceRequirements",
    "bounds_problem",
    "check_spec",
    "mapping",
    "required_terms",
    "select_workers",
    "typed_spec",
]


# The Pod fields the engine reads and writes, as the API server sends them (core/v1). Other
# fields pass through untouched, so these are total=False and never the whole Pod.
class ResourceRequirements(TypedDict, total=False):
    requests: dict[str, Any]
    limits: dict[str, Any]
    claims: list[dict[str, Any]]


class Container(TypedDict, total=False):
    name: str
    image: str
    command: list[str]
    args: list[str]
    env: list[dict[str, Any]]
    volumeMounts: list[dict[str, Any]]
    resources: ResourceRequirements
    restartPolicy: str
    envFrom: list[dict[str, Any]]
    securityContext: dict[str, Any]


class PodSpec(TypedDict, total=False):
    containers: list[Container]
    initContainers: list[Container]
    affinity: dict[str, Any]
    nodeSelector: dict[str, str]
    tolerations: list[dict[str, Any]]
    volumes: list[dict[str, Any]]
    resourceClaims: list[dict[str, Any]]
    schedulerName: str
    nodeName: str
    overhead: dict[str, Any]


def typed_spec(spec: dict[str, Any]) -> PodSpec:
    """A spec `check_spec` passed, seen through the fields the engine edits."""
    return cast(PodSpec, spec)


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


# The bounds on what a pod may ask, beyond which it is admitted unchanged with a warning
# (docs/policies.md "Bounds"): no node holds more, and past them the cost of the node shapes,
# the numbers and the patch would grow with the input instead of the fleet.
# The policy's bounds (webhook/policy/bounds.py) hold for pods too: one set of numbers.
MAX_CPU_CORES = MAX_CPUS
MAX_BYTES = MAX_MEMORY  # of memory or hugepages; ephemeral-storage likewise
MAX_CONTAINERS = 128  # init and app containers together
# The user's required node affinity: each term is repeated once per kubelet shape, so its
# size multiplies the patch.
MAX_TERMS = 64
MAX_EXPRESSIONS = 64  # per term


def bounds_problem(spec: dict[str, Any]) -> str | None:
    """The first field of a shape-checked spec beyond the bounds, in words; None if within."""
    count = sum(len(spec.get(k) or ()) for k in ("containers", "initContainers"))
    if count > MAX_CONTAINERS:
        return f"{count} containers, more than {MAX_CONTAINERS}"
    return _affinity_problem(spec) or _resources_problem(spec)


def required_terms(spec: Mapping[str, Any]) -> list[Any]:
    """The pod's own required nodeSelectorTerms (of a shape-checked spec), as written."""
    node = (spec.get("affinity") or {}).get("nodeAffinity") or {}
    terms: list[Any] = (node.get("requiredDuringSchedulingIgnoredDuringExecution") or {}).get(
        "nodeSelectorTerms"
    ) or []
    return terms


def _affinity_problem(spec: dict[str, Any]) -> str | None:
    terms = required_terms(spec)
    if len(terms) > MAX_TERMS:
        return f"{len(terms)} required nodeSelectorTerms, more than {MAX_TERMS}"
    for i, term in enumerate(terms):
        if len(term.get("matchExpressions") or ()) > MAX_EXPRESSIONS:
            return f"nodeSelectorTerms[{i}] has more than {MAX_EXPRESSIONS} matchExpressions"
    return None


def _resources_problem(spec: dict[str, Any]) -> str | None:
    sums: dict[str, Decimal] = {}
    for key in ("initContainers", "containers"):
        for i, container in enumerate(spec.get(key) or ()):
            resources = container.get("resources") or {}
            for part in ("limits", "requests"):
                for name, value in (resources.get(part) or {}).items():
                    where = f"spec.{key}[{i}].resources.{part}[{name}]"
                    problem = _beyond(str(name), value, where)
                    if problem is not None:
                        return problem
                    if part == "limits" and "/" in str(name):
                        sums[name] = sums.get(name, Decimal(0)) + parse_quantity(value)
    for name, total in sums.items():
        if total > MAX_DEVICES:
            return f"{total:f} {name} in all containers, more than {MAX_DEVICES} per pod"
    return None


def _beyond(name: str, value: Any, where: str) -> str | None:
    try:
        amount = parse_quantity(value)
    except (QuantityError, ArithmeticError):
        return f"{where} {str(value)[:32]!r} is not a quantity"
    if "/" in name:
        bound, shown = Decimal(MAX_DEVICES), str(MAX_DEVICES)
    elif name == "cpu":
        bound, shown = MAX_CPU_CORES, f"{MAX_CPU_CORES} CPUs"
    else:
        bound, shown = MAX_BYTES, "64Ti"
    if amount > bound:
        return f"{where} {str(value)[:32]!r} is more than {shown}"
    return None


# --- which containers are the pod's training workers ---------------------------------------
def select_workers(
    spec: PodSpec, *, names: list[str] | None, resource: str, warnings: list[str]
) -> list[Container]:
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
