"""The mutation engine: one pure function from (pod, namespace, policies) to a Mutation.

No I/O and no mutation of the input: the levels of the pod that change are copied once, each
step edits the copy, and the RFC 6902 patch is the diff of copy against input, so patch and
result always agree. The returned pod shares unchanged parts with the input: treat both as
read-only.
Each step lives in its own module (affinity, resources, datasets, launcher, env, scheduler);
the pod's fields are checked first (pod_fields), so the steps can trust the fields they edit.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from webhook.engine.affinity import (
    add_preferred,
    add_required,
    dataset_preferences,
    kubelet_terms,
    numa_request,
    required_expressions,
    shape_args,
    user_terms,
)
from webhook.engine.datasets import add_datasets
from webhook.engine.dra import DraPlan, claimed_workers, plan_dra, rewrite
from webhook.engine.env import add_env
from webhook.engine.launcher import bind_numa
from webhook.engine.lone_pod import lone_pod_warning
from webhook.engine.outcome import EngineSettings, Mutation, grouped_warnings
from webhook.engine.patch import clone, json_diff
from webhook.engine.pod_fields import (
    Container,
    PodSpec,
    bounds_problem,
    check_spec,
    mapping,
    select_workers,
    typed_spec,
)
from webhook.engine.resources import ResourcePlan, apply_resources, resource_plan
from webhook.engine.scheduler import set_scheduler
from webhook.placement_model.kubelet_admission import pod_units
from webhook.placement_model.requests import all_containers, pod_gpus
from webhook.policy.loader import PolicySet
from webhook.policy.model import PlacementPolicy
from webhook.vocabulary import APPLIED_ANNOTATION, MIRROR_ANNOTATION, POLICY_LABEL

__all__ = ["mutate"]

_DEFAULT_SETTINGS = EngineSettings()


def mutate(
    pod: dict[str, Any],
    namespace: str,
    policies: PolicySet,
    settings: EngineSettings = _DEFAULT_SETTINGS,
) -> Mutation:
    """Apply the policy the pod names (label topoplace.io/policy) and return the verdict."""
    metadata = mapping(pod.get("metadata"), "metadata")
    labels = mapping(metadata.get("labels"), "metadata.labels")
    name = labels.get(POLICY_LABEL)
    if name is None:
        return Mutation(pod=pod)
    annotations = mapping(metadata.get("annotations"), "metadata.annotations")
    if MIRROR_ANNOTATION in annotations:
        return Mutation(
            pod=pod,
            policy=name,
            warnings=[f"static (mirror) pod: policy {name!r} not applied"],
        )
    policy = policies.get(name)
    if policy is None:
        return _missing(pod, name, policies, settings)
    if not policy.allows_namespace(namespace):
        return _forbidden(pod, policy, namespace)
    # The applied annotation is a record, never a reason to skip: on reinvocation another
    # webhook (a sidecar injector) may have added containers that still need the policy.
    # The steps are idempotent, so an unchanged pod still gets an empty patch.
    applied = f"{name}@{policies.hash_of(name)}"
    check_spec(pod.get("spec"))
    beyond = bounds_problem(pod["spec"])
    if beyond is not None:
        return _beyond_bounds(pod, name, beyond)
    new = _working_copy(pod)
    found: list[str] = []
    try:
        denial = _apply(
            typed_spec(new["spec"]),
            policy,
            namespace,
            resource_plan(policy, applied),
            settings,
            found,
        )
    except _OutOfBounds as exc:
        return _beyond_bounds(pod, name, str(exc))
    warnings = grouped_warnings(found)
    lone = lone_pod_warning(pod, policy)
    if lone is not None:
        warnings.append(lone)
    if denial is not None:
        return Mutation(pod=pod, allowed=False, denial=denial, warnings=warnings, policy=name)
    new_metadata = new["metadata"]
    new_metadata["annotations"] = {
        **(new_metadata.get("annotations") or {}),
        APPLIED_ANNOTATION: applied,
    }
    patch = json_diff(pod, new)
    return Mutation(pod=new, patch=patch, warnings=warnings, policy=name, applied=policy)


def _apply(
    spec: PodSpec,
    policy: PlacementPolicy,
    namespace: str,
    plan: ResourcePlan,
    settings: EngineSettings,
    warnings: list[str],
) -> str | None:
    """Run every step on `spec`, in order; returns a denial message, or None."""
    rules = policy.spec
    workers = _workers(spec, policy, warnings)
    dra = plan_dra(spec, policy, workers, namespace, settings.claim_templates, warnings)
    if dra.denial is not None:
        return dra.denial
    if not workers and (rules.datasets or rules.env or rules.launcher.numa_binding):
        warnings.append(
            f"no worker containers (named in spec.workers or with a {rules.gpu_resource} "
            f"limit): datasets, env and launcher settings not applied"
        )
    injected = add_datasets(
        spec,
        rules.datasets,
        workers,
        cache_root=settings.cache_root,
        image=settings.prefetch_image,
        warnings=warnings,
        max_cache_bytes=settings.max_cache_bytes,
    )
    _resources(spec, policy, plan, dra, workers, injected, warnings)
    rewrite(spec, policy, dra)
    _launch(workers, policy, warnings)
    _affinity(spec, policy, dra, warnings)
    set_scheduler(spec, rules.placement.numa_aware_scheduler, warnings=warnings)
    return None


def _workers(spec: PodSpec, policy: PlacementPolicy, warnings: list[str]) -> list[Container]:
    rules = policy.spec
    workers = select_workers(
        spec, names=rules.workers, resource=rules.gpu_resource, warnings=warnings
    )
    if rules.dra is not None and rules.workers is None:
        # Seen before: our claim replaced the GPU limit that made these containers workers.
        known = {id(w) for w in workers}
        workers += [c for c in claimed_workers(spec, policy) if id(c) not in known]
    return workers


def _resources(
    spec: PodSpec,
    policy: PlacementPolicy,
    plan: ResourcePlan,
    dra: DraPlan,
    workers: list[Container],
    injected: list[Container],
    warnings: list[str],
) -> None:
    # Claims allocate the NICs (or the pod's own claims do): no RDMA extended resource.
    claimed_plan = replace(plan, rdma=None) if policy.spec.dra is not None else plan
    worker_ids = {id(w) for w in workers}
    # Prefetch containers are built Guaranteed (requests == limits, no GPU): resources would
    # leave them as they are, so they skip it.
    skip = {id(c) for c in injected}
    for container in all_containers(spec):
        if id(container) not in skip:
            gpus = dra.gpus.get(id(container))
            claimed = gpus is not None or dra.own_claims
            apply_resources(
                container,
                claimed_plan if claimed else plan,
                worker=id(container) in worker_ids,
                warnings=warnings,
                gpus=gpus,
            )


def _launch(workers: list[Container], policy: PlacementPolicy, warnings: list[str]) -> None:
    mode = policy.spec.launcher.numa_binding
    for worker in workers:
        if mode is not None and not bind_numa(worker, mode):
            warnings.append(
                f"worker container {worker.get('name', '?')}: no torchrun in command/args; "
                f"--numa-binding={mode} not added"
            )
        add_env(worker, policy.spec.env, warnings=warnings)


def _affinity(spec: PodSpec, policy: PlacementPolicy, dra: DraPlan, warnings: list[str]) -> None:
    """What the kubelet aligns, from the resources just set: singleNumaNode's one NUMA node,
    and the node shapes whose kubelet admits the pod."""
    rules = policy.spec
    # After the rewrite this counts only the GPUs left on the device-plugin path.
    gpus = pod_gpus(spec, rules.gpu_resource)
    devices = gpus > 0 or not (dra.active or dra.own_claims)
    placement = rules.placement
    units = pod_units(spec)
    args = shape_args(placement, units, gpus)
    # singleNumaNode's CPUs and memory: per scope in the shapes when there are shapes.
    numa = numa_request(units) if placement.single_numa_node and args is None else None
    shapes = kubelet_terms(args, units, rules.gpu_resource)
    _written_terms_bound(spec, shapes)
    exprs = required_expressions(
        placement,
        gpus=gpus,
        warnings=warnings,
        devices=devices,
        numa=numa,
        shaped=shapes is not None,
    )
    add_required(spec, exprs, shapes)
    add_preferred(spec, dataset_preferences(rules.datasets))


def _beyond_bounds(pod: dict[str, Any], name: str, why: str) -> Mutation:
    """Answered at once, unchanged: past the bounds the cost would follow the pod's numbers."""
    warning = f"{why}; pod admitted unchanged (Topoplace's bounds: docs/policies.md)"
    return Mutation(pod=pod, warnings=[warning], policy=name)


class _OutOfBounds(Exception):
    """The pod is beyond a documented bound: admitted unchanged with this message."""


# Each user term is written once per kubelet shape: their product is what the patch holds.
MAX_WRITTEN_TERMS = 256


def _written_terms_bound(spec: PodSpec, shapes: Any) -> None:
    if not shapes:
        return
    count = user_terms(spec) * len(shapes)
    if count > MAX_WRITTEN_TERMS:
        raise _OutOfBounds(
            f"the node affinity would hold {count} terms (the pod's terms times its kubelet "
            f"shapes), more than {MAX_WRITTEN_TERMS}"
        )


def _working_copy(pod: dict[str, Any]) -> dict[str, Any]:
    """Copy exactly the levels the steps edit; everything else stays shared with the input.

    The steps replace lists and dicts below a container (resources, env, mounts, argv) rather
    than editing them, so containers need only a shallow copy. Affinity is edited in place
    and is small, so it is copied whole. Sharing keeps the copy cheap and lets the diff skip
    untouched subtrees by identity.
    """
    new = dict(pod)
    new["metadata"] = dict(pod.get("metadata") or {})
    spec = new["spec"] = dict(pod["spec"])
    for key in ("containers", "initContainers"):
        if spec.get(key):
            spec[key] = [dict(c) for c in spec[key]]
    if spec.get("affinity"):
        spec["affinity"] = clone(spec["affinity"])
    return new


def _forbidden(pod: dict[str, Any], policy: PlacementPolicy, namespace: str) -> Mutation:
    allowed = _some(tuple(policy.spec.namespaces or ()), limit=5)
    what = f"namespace {namespace!r} may not use placement policy {policy.name!r} ({allowed})"
    if policy.spec.on_missing == "deny":
        denial = (
            f"{what}: remove label {POLICY_LABEL} from the pod, or ask the platform team to "
            f"add the namespace to the policy's spec.namespaces"
        )
        return Mutation(pod=pod, allowed=False, denial=denial, policy=policy.name)
    # The API server may truncate warnings past 256 characters: keep them short.
    return Mutation(pod=pod, warnings=[f"{what}; pod admitted unchanged"], policy=policy.name)


def _missing(
    pod: dict[str, Any], name: str, policies: PolicySet, settings: EngineSettings
) -> Mutation:
    """No such policy: there is no `onMissing` to read, so the webhook's setting decides."""
    what = f"placement policy {name!r} does not exist (known: {_some(policies.names)})"
    if settings.on_missing_policy == "deny":
        denial = (
            f"{what}: fix the pod's {POLICY_LABEL} label, or ask the platform team to add "
            "the policy"
        )
        return Mutation(pod=pod, allowed=False, denial=denial, policy=name)
    return Mutation(pod=pod, warnings=[f"{what}; pod admitted unchanged"], policy=name)


def _some(names: tuple[str, ...], limit: int = 5) -> str:
    if not names:
        return "(none loaded)"
    shown = ", ".join(names[:limit])
    return shown + (f" and {len(names) - limit} more" if len(names) > limit else "")
