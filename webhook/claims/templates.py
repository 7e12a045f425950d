"""ResourceClaimTemplate bodies for DRA policies, and the plan from found to wanted (pure).

A template for N GPUs holds requests `gpu-0…gpu-<N-1>` and, with `nic`, `nic-0…nic-<N-1>`,
each exactly one device. Each `gpu-i`/`nic-i` pair shares the policy's `align` attribute;
with `placement.singleNumaNode` one more constraint puts every device on one NUMA node.

Templates carry the managed-by label (only those are ever listed, changed or deleted) and a
hash of their spec: a template's spec is immutable in resource.k8s.io/v1, so a policy change
is a delete and a create, decided by comparing hashes (the API server adds defaults, so the
stored spec never equals ours field by field).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from webhook.policy.dra import ALIGN_ATTRIBUTES, Dra, DraDevice, template_name
from webhook.policy.model import PlacementPolicy
from webhook.vocabulary import POLICY_LABEL

__all__ = [
    "API_VERSION",
    "HASH_ANNOTATION",
    "MANAGED_BY",
    "MANAGED_SELECTOR",
    "Key",
    "Plan",
    "build_template",
    "desired_templates",
    "plan_changes",
    "policy_templates",
    "templates_for_pod",
]

API_VERSION = "resource.k8s.io/v1"
MANAGED_BY = ("app.kubernetes.io/managed-by", "topoplace")
MANAGED_SELECTOR = f"{MANAGED_BY[0]}={MANAGED_BY[1]}"
HASH_ANNOTATION = "topoplace.io/template-hash"
NUMA_ATTRIBUTE = ALIGN_ATTRIBUTES["numaNode"]

Key = tuple[str, str]  # (namespace, name)


def build_template(policy: PlacementPolicy, gpus: int, namespace: str) -> dict[str, Any]:
    """The ResourceClaimTemplate for `gpus` GPUs of a DRA policy, in `namespace`."""
    dra = policy.spec.dra
    if dra is None:
        raise ValueError(f"policy {policy.name!r} has no spec.dra")
    spec = {"spec": {"devices": _devices(dra, gpus, policy.spec.placement.single_numa_node)}}
    return {
        "apiVersion": API_VERSION,
        "kind": "ResourceClaimTemplate",
        "metadata": {
            "name": template_name(policy.name, gpus),
            "namespace": namespace,
            "labels": {MANAGED_BY[0]: MANAGED_BY[1], POLICY_LABEL: policy.name},
            "annotations": {HASH_ANNOTATION: _hash(spec)},
        },
        "spec": spec,
    }


def _devices(dra: Dra, gpus: int, single_numa_node: bool) -> dict[str, Any]:
    requests = [_request(f"gpu-{i}", dra.gpu) for i in range(gpus)]
    constraints: list[dict[str, Any]] = []
    if dra.nic is not None:
        requests += [_request(f"nic-{i}", dra.nic) for i in range(gpus)]
        constraints += [
            {"requests": [f"gpu-{i}", f"nic-{i}"], "matchAttribute": dra.attribute}
            for i in range(gpus)
        ]
    if single_numa_node and len(requests) > 1:
        names = [r["name"] for r in requests]
        constraints.append({"requests": names, "matchAttribute": NUMA_ATTRIBUTE})
    devices: dict[str, Any] = {"requests": requests}
    if constraints:
        devices["constraints"] = constraints
    return devices


def _request(name: str, device: DraDevice) -> dict[str, Any]:
    exactly: dict[str, Any] = {"deviceClassName": device.device_class_name, "count": 1}
    if device.selector is not None:
        exactly["selectors"] = [{"cel": {"expression": device.selector}}]
    return {"name": name, "exactly": exactly}


def _hash(spec: Mapping[str, Any]) -> str:
    text = json.dumps(spec, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def policy_templates(policy: PlacementPolicy, namespace: str) -> list[dict[str, Any]]:
    """Every template `policy` wants in `namespace` (none if not DRA or not allowed there)."""
    dra = policy.spec.dra
    if dra is None or not policy.allows_namespace(namespace):
        return []
    return [build_template(policy, n, namespace) for n in sorted(dra.gpu_counts)]


def desired_templates(
    policies: Iterable[PlacementPolicy], namespaces: Iterable[str]
) -> dict[Key, dict[str, Any]]:
    """Every template the policies want across the namespaces, by (namespace, name)."""
    wanted: dict[Key, dict[str, Any]] = {}
    dra_policies = [p for p in policies if p.spec.dra is not None]
    for namespace in namespaces:
        for policy in dra_policies:
            for body in policy_templates(policy, namespace):
                wanted[(namespace, body["metadata"]["name"])] = body
    return wanted


def templates_for_pod(
    pod: dict[str, Any], namespace: str, policies: Mapping[str, PlacementPolicy]
) -> list[dict[str, Any]]:
    """The templates a (mutated) pod's claims reference, as the reconciler would make them."""
    labels = (pod.get("metadata") or {}).get("labels") or {}
    policy = policies.get(labels.get(POLICY_LABEL, ""))
    if policy is None or policy.spec.dra is None:
        return []
    by_name = {template_name(policy.name, n): n for n in policy.spec.dra.gpu_counts}
    claims = (pod.get("spec") or {}).get("resourceClaims") or []
    wanted = sorted(
        {
            by_name[c["resourceClaimTemplateName"]]
            for c in claims
            if isinstance(c, dict) and c.get("resourceClaimTemplateName") in by_name
        }
    )
    return [build_template(policy, n, namespace) for n in wanted]


@dataclass(frozen=True, slots=True)
class Plan:
    """What to do: create these bodies; delete these (namespace, name, resourceVersion)."""

    create: list[dict[str, Any]] = field(default_factory=list)
    delete: list[tuple[str, str, str]] = field(default_factory=list)

    def __bool__(self) -> bool:
        return bool(self.create or self.delete)


def plan_changes(wanted: Mapping[Key, dict[str, Any]], owned: Iterable[Mapping[str, Any]]) -> Plan:
    """From the templates Topoplace owns (as listed) to the templates wanted.

    A template with a stale hash is deleted now and created on the next pass, once the
    delete is seen: creating it in the same pass would meet 409 AlreadyExists.
    """
    plan = Plan()
    found: set[Key] = set()
    for obj in owned:
        meta = obj.get("metadata") or {}
        key = (meta.get("namespace", ""), meta.get("name", ""))
        found.add(key)
        body = wanted.get(key)
        have = (meta.get("annotations") or {}).get(HASH_ANNOTATION)
        if body is None or have != body["metadata"]["annotations"][HASH_ANNOTATION]:
            plan.delete.append((*key, str(meta.get("resourceVersion", ""))))
    plan.create.extend(body for key, body in sorted(wanted.items()) if key not in found)
    return plan
