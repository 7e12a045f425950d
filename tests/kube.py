"""Kubernetes oracles for tests, written independently of the engine.

- `assert_valid(obj)`: strict validation against the official OpenAPI-derived JSON Schema that
  kubernetes-validate ships (unknown fields are errors). Validators are cached per kind because
  loading the definitions file costs ~0.5 s.
- `qos_class(pod)`: the kubelet's QoS rules (GetPodQOS), init containers included.
"""

from __future__ import annotations

import functools
import json
import re
from decimal import Decimal
from importlib import resources
from typing import Any

import jsonschema
import kubernetes_validate
from referencing import Registry, Resource

__all__ = ["K8S_VERSION", "SchemaError", "assert_valid", "parse_quantity", "qos_class"]

K8S_VERSION = kubernetes_validate.latest_version()


class SchemaError(AssertionError):
    pass


def _schema_file(name: str) -> Any:
    ref = resources.files("kubernetes_validate").joinpath(
        f"kubernetes-json-schema/v{K8S_VERSION}-local-strict/{name}"
    )
    return json.loads(ref.read_text())


@functools.cache
def _definitions() -> Resource:
    return Resource.from_contents(_schema_file("_definitions.json"))


@functools.cache
def _validator(kind: str, api_version: str) -> jsonschema.Validator:
    # Same file naming as kubernetes_validate.validate: rbac.authorization.k8s.io/v1 -> rbac-v1
    group_version = re.sub(r"^([^./]*)(?:\.[^/]*)?/", r"\1-", api_version)
    schema = _schema_file(f"{kind.lower()}-{group_version}.json")
    registry = _definitions() @ (Resource.from_contents(schema) @ Registry())
    return jsonschema.Draft202012Validator(schema, registry=registry)


def assert_valid(obj: dict[str, Any]) -> None:
    """Raise SchemaError naming the first violation and where it is."""
    try:
        validator = _validator(obj["kind"], obj["apiVersion"])
    except FileNotFoundError as exc:
        raise SchemaError(f"no schema for {obj.get('apiVersion')}/{obj.get('kind')}") from exc
    error = jsonschema.exceptions.best_match(validator.iter_errors(obj))
    if error is not None:
        where = "/".join(str(p) for p in error.absolute_path) or "<root>"
        raise SchemaError(f"{obj['kind']} invalid at {where}: {error.message[:300]}")


_SUFFIX = {
    "Ki": 2**10,
    "Mi": 2**20,
    "Gi": 2**30,
    "Ti": 2**40,
    "Pi": 2**50,
    "Ei": 2**60,
    "n": Decimal("1e-9"),
    "u": Decimal("1e-6"),
    "m": Decimal("1e-3"),
    "": 1,
    "k": 10**3,
    "M": 10**6,
    "G": 10**9,
    "T": 10**12,
    "P": 10**15,
    "E": 10**18,
}
_QUANTITY = re.compile(r"([+-]?[0-9.]+(?:[eE][+-]?[0-9]+)?)(Ki|Mi|Gi|Ti|Pi|Ei|n|u|m|k|M|G|T|P|E)?")


def parse_quantity(text: str | int | float) -> Decimal:
    m = _QUANTITY.fullmatch(str(text).strip())
    if not m:
        raise ValueError(f"not a Kubernetes quantity: {text!r}")
    number, suffix = m.group(1), m.group(2) or ""
    return Decimal(number) * Decimal(_SUFFIX[suffix])


_QOS_RESOURCES = ("cpu", "memory")


def qos_class(pod: dict[str, Any]) -> str:
    """Guaranteed / Burstable / BestEffort by the kubelet's rules (pod-level resources aside)."""
    spec = pod["spec"]
    containers = list(spec.get("initContainers") or []) + list(spec.get("containers") or [])
    requests: dict[str, Decimal] = {}
    limits: dict[str, Decimal] = {}
    guaranteed = True
    for c in containers:
        res = c.get("resources") or {}
        for name, q in (res.get("requests") or {}).items():
            if name in _QOS_RESOURCES and parse_quantity(q) > 0:
                requests[name] = requests.get(name, Decimal(0)) + parse_quantity(q)
        found = set()
        for name, q in (res.get("limits") or {}).items():
            if name in _QOS_RESOURCES and parse_quantity(q) > 0:
                found.add(name)
                limits[name] = limits.get(name, Decimal(0)) + parse_quantity(q)
        if found != set(_QOS_RESOURCES):
            guaranteed = False
    if not requests and not limits:
        return "BestEffort"
    if guaranteed:
        for name, req in requests.items():
            if limits.get(name) != req:
                guaranteed = False
                break
    if guaranteed and len(requests) == len(limits):
        return "Guaranteed"
    return "Burstable"
