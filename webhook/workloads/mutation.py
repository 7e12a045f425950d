"""Mutate a workload's pod templates as their pods would be mutated: one pure function.

Why at the workload: a queue (Kueue) decides admission and counts quota from the pod
templates when the workload is created, before any pod exists. Mutating only the pods would
let it count the smaller requests the user wrote. So each template gets the patch its pods
would get, with paths under the template's pointer; the pods then pass the pod webhook with
an empty patch (the engine is idempotent).

A template opts in with the policy label; in the workload kinds the webhook admits
(`WORKLOAD_KINDS`), the workload's own label also counts, and is copied into the templates it
mutates, so their pods carry it and the pod webhook still sees them (a sidecar injector's
additions are brought to the policy's state there).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Final

from webhook.engine.outcome import EngineSettings
from webhook.engine.patch import JsonPatch, json_diff, prefix_patch
from webhook.engine.pod_fields import InvalidPod
from webhook.engine.recipe import mutate
from webhook.policy.loader import PolicySet
from webhook.policy.model import KeepTogether
from webhook.vocabulary import POLICY_LABEL
from webhook.workloads.gangs import WorkloadScheduling, pod_group_gang
from webhook.workloads.templates import PodTemplate, pod_templates, replace_at
from webhook.workloads.together import keep_together

__all__ = [
    "WORKLOAD_KINDS",
    "WorkloadMutation",
    "inherits_label",
    "mutate_pod_group",
    "mutate_workload",
]

# (API group, kind) of the workloads the webhook mutates at CREATE: the ones a queue admits
# from their templates. The MutatingWebhookConfiguration's rules list the same resources.
WORKLOAD_KINDS: Final[frozenset[tuple[str, str]]] = frozenset(
    {
        ("batch", "Job"),
        ("jobset.x-k8s.io", "JobSet"),
        ("leaderworkerset.x-k8s.io", "LeaderWorkerSet"),
        # Kubeflow training operator (kubeflow.org/v1) and the MPI operator (v2beta1).
        ("kubeflow.org", "PyTorchJob"),
        ("kubeflow.org", "TFJob"),
        ("kubeflow.org", "MPIJob"),
        ("kubeflow.org", "XGBoostJob"),
        ("kubeflow.org", "PaddleJob"),
        ("kubeflow.org", "JAXJob"),
    }
)
_KIND_NAMES: Final = frozenset(kind for _group, kind in WORKLOAD_KINDS)


def inherits_label(kind: Any) -> bool:
    """Whether a workload of this kind passes its own policy label on to its templates."""
    return kind in _KIND_NAMES


@dataclass(frozen=True, slots=True)
class WorkloadMutation:
    """The verdict on one workload: the object after, the patch against the input, notes.

    `denials` is non-empty when a template's policy refuses it (onMissing: deny, or the
    webhook's --on-missing-policy deny): the workload as a whole is then refused. `unread`
    names templates that could not be read; they are left unchanged. `templates` counts those
    that named a policy and were read.
    """

    obj: dict[str, Any]
    patch: JsonPatch = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    denials: list[str] = field(default_factory=list)
    policy: str | None = None
    templates: int = 0
    unread: list[str] = field(default_factory=list)


def mutate_workload(
    obj: dict[str, Any],
    namespace: str,
    policies: PolicySet,
    settings: EngineSettings,
    *,
    strict: bool = False,
    label: str = "",
    scheduling: WorkloadScheduling | None = None,
) -> WorkloadMutation:
    """Apply the policy each pod template names (or the workload names) to that template.

    strict: a template that is not shaped like a pod raises InvalidPod (offline, exit 2);
    otherwise (the webhook) it is left unchanged with a warning, so a workload a queue alone
    would take is never refused because of us. Messages start with `label` (such as
    "Job/train") and the template's path. `scheduling`: what the cluster serves (gangs.py).
    """
    own = _policy_label(obj) if inherits_label(obj.get("kind")) else None
    after = obj
    patch: JsonPatch = []
    warnings: list[str] = []
    denials: list[str] = []
    unread: list[str] = []
    policy: str | None = None
    count = 0
    for template in pod_templates(obj):
        where = " ".join(part for part in (label, template.where) if part)
        try:
            named, working = _opted_in(template, own)
            if named is None:
                continue
            result = mutate(working, namespace, policies, settings)
        except InvalidPod as exc:
            if strict:
                raise InvalidPod(_at(where, str(exc))) from None
            unread.append(where)
            warnings.append(_at(where, f"cannot read the pod template ({exc}); left unchanged"))
            continue
        policy = policy or named
        count += 1
        warnings.extend(_at(where, w) for w in result.warnings)
        if not result.allowed:
            denials.append(_at(where, result.denial or "refused"))
        elif result.patch:  # applied: the label goes in with the rest; never alone
            after = replace_at(after, template.path, result.pod)
            # With the label copied in, the engine's patch misses it: diff from the template.
            ops = result.patch if working is template.pod else json_diff(template.pod, result.pod)
            patch.extend(prefix_patch(ops, template.pointer))
    # A Pod's own lone-pod warning comes from the engine; only workloads are kept together.
    rule = _rule(policies, policy) if not denials and obj.get("kind") != "Pod" else None
    if rule is not None:
        together = keep_together(after, rule, scheduling)
        patch.extend(json_diff(after, together.obj))  # applied after the template ops
        after = together.obj
        warnings.extend(_at(label, w) for w in together.warnings)
    return WorkloadMutation(after, patch, warnings, denials, policy, count, unread)


def mutate_pod_group(
    obj: dict[str, Any],
    policies: PolicySet,
    scheduling: WorkloadScheduling | None,
    *,
    label: str = "",
) -> WorkloadMutation:
    """A PodGroup that carries the policy label: the topology constraint on the level's key.

    Never refused (a PodGroup is no pod): a policy that is absent, has no required
    keepTogether, or a cluster that drops the constraint leaves it unchanged, with a warning.
    """
    name = _policy_label(obj)
    if name is None:
        return WorkloadMutation(obj)
    policy = policies.get(name)
    rule = policy.spec.placement.keep_together if policy is not None else None
    if rule is None or rule.mode != "required":
        why = (
            f"policy {name} not found"
            if policy is None
            else "a PodGroup's topology constraint is required only, the rule preferred"
            if rule is not None
            else f"policy {name} has no keepTogether"
        )
        return WorkloadMutation(obj, warnings=[_at(label, f"left unchanged: {why}")], policy=name)
    if scheduling is not None and not scheduling.pod_groups:
        why = scheduling.lacking(jobs=False)
        warning = _at(label, f"keepTogether: left unchanged, the constraint would not hold ({why})")
        return WorkloadMutation(obj, warnings=[warning], policy=name, templates=1)
    after, warnings = pod_group_gang(obj, rule)
    patch = json_diff(obj, after)
    return WorkloadMutation(after, patch, [_at(label, w) for w in warnings], [], name, 1)


def _rule(policies: PolicySet, name: str | None) -> KeepTogether | None:
    policy = policies.get(name) if name is not None else None
    return policy.spec.placement.keep_together if policy is not None else None


def _opted_in(template: PodTemplate, own: str | None) -> tuple[str | None, dict[str, Any]]:
    """The policy a template names (its own label first), and the template to mutate."""
    meta = template.pod.get("metadata")
    if meta is not None and not isinstance(meta, dict):
        raise InvalidPod(f"metadata must be an object, got {type(meta).__name__}")
    labels = (meta or {}).get("labels")
    if labels is not None and not isinstance(labels, dict):
        raise InvalidPod(f"metadata.labels must be an object, got {type(labels).__name__}")
    named = (labels or {}).get(POLICY_LABEL)
    if named is not None and not isinstance(named, str):
        raise InvalidPod(f"metadata.labels.{POLICY_LABEL} must be a string")
    if named is not None or own is None:
        return named, template.pod
    working = dict(template.pod)
    working["metadata"] = {**(meta or {}), "labels": {**(labels or {}), POLICY_LABEL: own}}
    return own, working


def _at(where: str, text: str) -> str:
    return f"{where}: {text}" if where else text


def _policy_label(obj: dict[str, Any]) -> str | None:
    meta = obj.get("metadata")
    labels = meta.get("labels") if isinstance(meta, dict) else None
    value = labels.get(POLICY_LABEL) if isinstance(labels, dict) else None
    return value if isinstance(value, str) else None
