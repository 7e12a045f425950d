"""DRA: a worker's `nvidia.com/gpu: N` becomes a ResourceClaim from the policy's template.

For a policy with `spec.dra`, each worker asking for N GPUs, N in `gpuCounts`, gets a pod
`spec.resourceClaims` entry `topoplace-<container>` referencing `topoplace-<policy>-<N>gpu`
and a `resources.claims` entry naming it; the GPU extended resource is taken off the
container (the claim allocates the GPUs, and the NICs paired with them, so no RDMA extended
resource either). The templates are the claim-templates command's job (webhook/claims/).

Fallbacks, each with a warning that says why: a count without a template (not in
`gpuCounts`, or a lookup says the template is not there yet) keeps the device-plugin path,
or is denied with `onMissing: deny`; a pod that already carries claims of its own keeps them
and gets none from us, nor an RDMA extended resource (its claims own its devices).
Reinvocation: a container that already references our claim is a DRA worker with the
template's N, so a second pass changes nothing.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, cast

from webhook.engine.pod_fields import Container, PodSpec, ResourceRequirements
from webhook.placement_model.requests import container_gpus
from webhook.policy.dra import template_name
from webhook.policy.model import PlacementPolicy

__all__ = [
    "CLAIM_PREFIX",
    "DraPlan",
    "TemplateLookup",
    "claim_name",
    "claimed_workers",
    "plan_dra",
    "rewrite",
]

CLAIM_PREFIX = "topoplace-"
# (namespace, template name) → True (there), False (known missing), None (cannot tell).
TemplateLookup = Callable[[str, str], bool | None]


def claim_name(container: str) -> str:
    """The pod claim name for a worker container: a DNS label (63 characters at most)."""
    name = CLAIM_PREFIX + container
    if len(name) <= 63:
        return name
    digest = hashlib.sha256(container.encode()).hexdigest()[:8]
    return f"{CLAIM_PREFIX}{container[:43].rstrip('-')}-{digest}"


@dataclass(slots=True)
class DraPlan:
    """Which workers get (or already have) a Topoplace claim, and with how many GPUs."""

    gpus: dict[int, int] = field(default_factory=dict)
    """id(container) → GPU count, for every DRA worker (new and already rewritten)."""
    new: list[tuple[Container, int]] = field(default_factory=list)
    """Workers to rewrite now, with their GPU count."""
    own_claims: bool = False
    """The pod brought claims of its own: no Topoplace claim, no RDMA extended resource."""
    denial: str | None = None

    @property
    def active(self) -> bool:
        return bool(self.gpus)


def plan_dra(
    spec: PodSpec,
    policy: PlacementPolicy,
    workers: list[Container],
    namespace: str,
    templates: TemplateLookup | None,
    warnings: list[str],
) -> DraPlan:
    """Decide, per worker, between the DRA claim and the device-plugin path."""
    plan = DraPlan()
    dra = policy.spec.dra
    if dra is None:
        return plan
    ours = _our_claims(spec, policy.name)
    foreign = [c.get("name", "?") for c in _claims(spec) if c.get("name") not in ours]
    if foreign and not ours:
        plan.own_claims = True
        warnings.append(
            f"pod already carries resource claims ({', '.join(map(str, foreign[:3]))}); they "
            "are kept, and Topoplace adds no claim and no RDMA resource"
        )
        return plan
    missing: list[str] = []
    for worker in workers:
        name = worker.get("name", "?")
        have = ours.get(claim_name(str(name)))
        if have is not None and _references(worker, claim_name(str(name))):
            plan.gpus[id(worker)] = have
            continue
        gpus = container_gpus(worker, policy.spec.gpu_resource)
        if gpus <= 0:
            continue
        why = _no_template(policy, gpus, namespace, templates)
        if why is not None:
            missing.append(f"worker container {name}: {why}")
            continue
        plan.gpus[id(worker)] = gpus
        plan.new.append((worker, gpus))
    if missing and policy.spec.on_missing == "deny":
        plan.denial = "; ".join(missing) + " (policy onMissing: deny)"
    warnings.extend(f"{m}; device-plugin path used" for m in missing)
    return plan


def rewrite(spec: PodSpec, policy: PlacementPolicy, plan: DraPlan) -> None:
    """Give each new DRA worker its claim; take the GPU extended resource off it."""
    if not plan.new:
        return
    resource = policy.spec.gpu_resource
    pod_claims = list(_claims(spec))
    for worker, gpus in plan.new:
        name = claim_name(str(worker.get("name", "?")))
        template = template_name(policy.name, gpus)
        pod_claims = [c for c in pod_claims if c.get("name") != name]
        pod_claims.append({"name": name, "resourceClaimTemplateName": template})
        resources: dict[str, Any] = dict(worker.get("resources") or {})
        for key in ("limits", "requests"):
            if resources.get(key) is not None:
                resources[key] = {k: v for k, v in resources[key].items() if k != resource}
        claims = [c for c in _dicts(resources.get("claims")) if c.get("name") != name]
        resources["claims"] = [*claims, {"name": name}]
        worker["resources"] = cast(ResourceRequirements, resources)
    spec["resourceClaims"] = pod_claims


def _no_template(
    policy: PlacementPolicy, gpus: int, namespace: str, templates: TemplateLookup | None
) -> str | None:
    dra = policy.spec.dra
    if dra is None:
        raise ValueError(f"policy {policy.metadata.name} has no spec.dra to find a template for")
    if gpus not in dra.gpu_counts:
        counts = ", ".join(map(str, sorted(dra.gpu_counts)))
        return f"{gpus} GPUs is not among the policy's DRA gpuCounts ({counts})"
    name = template_name(policy.name, gpus)
    if templates is not None and templates(namespace, name) is False:
        return f"ResourceClaimTemplate {name} is not in namespace {namespace} yet"
    return None


def claimed_workers(spec: PodSpec, policy: PlacementPolicy) -> list[Container]:
    """App containers that reference a claim Topoplace added (a pod seen before)."""
    if policy.spec.dra is None or not spec.get("resourceClaims"):
        return []
    ours = _our_claims(spec, policy.name)
    return [
        c
        for c in spec.get("containers") or []
        if ours
        and _references(c, claim_name(str(c.get("name", "?"))))
        and claim_name(str(c.get("name", "?"))) in ours
    ]


def _dicts(value: Any) -> list[dict[str, Any]]:
    return [c for c in value if isinstance(c, dict)] if isinstance(value, list) else []


def _claims(spec: PodSpec) -> list[dict[str, Any]]:
    return _dicts(spec.get("resourceClaims"))


def _our_claims(spec: PodSpec, policy: str) -> dict[str, int]:
    """Pod claims that Topoplace added for this policy: claim name → GPU count."""
    pattern = re.compile(rf"{re.escape(template_name(policy, 0)[:-4])}(\d+)gpu")
    found: dict[str, int] = {}
    for claim in _claims(spec):
        name = claim.get("name")
        match = pattern.fullmatch(str(claim.get("resourceClaimTemplateName") or ""))
        if isinstance(name, str) and name.startswith(CLAIM_PREFIX) and match:
            found[name] = int(match.group(1))
    return found


def _references(container: Container, name: str) -> bool:
    resources = container.get("resources") or {}
    return any(c.get("name") == name for c in _dicts(resources.get("claims")))
