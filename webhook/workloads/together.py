"""keepTogether: what keeps a workload's pods within one domain of a network level. (pure)

- Under Kueue (the workload carries Kueue's queue-name label): each pod template gets Kueue's
  topology annotation for the level (`podset-required-topology` or `-preferred-topology`;
  with `sliceSize`, the slice annotations and a preferred whole), and Kueue admits the
  workload only where the whole of it fits one domain. Kueue's own scheduling gate is left to
  Kueue.
- Pods that name a PodGroup (`spec.schedulingGroup`): that group keeps them (gangs.py); a
  workload whose pods name two groups is left as written, with a warning.
- A Job, where the cluster serves PodGroups with the gates on (`WorkloadScheduling.jobs`) and
  the rule is required: the Job's `spec.scheduling` asks for a gang within one domain; the
  Job controller writes its PodGroup and the scheduler places the group as a whole.
- Otherwise, without Kueue: a LeaderWorkerSet gets `exclusive-topology` (each group in a
  domain of its own); a JobSet of one child Job gets JobSet's `exclusive-topology`; every
  other workload gets pod affinity to its own pods (the label its controller puts on them) over the
  level's key. That affinity's weakness: the first pod has no peer yet and chooses the
  domain alone, so a domain too small for the rest leaves them Pending (required) or spread
  (preferred).
An annotation or affinity term the user already wrote is kept, with a warning.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Final

from webhook.policy.model import KeepTogether
from webhook.workloads.gangs import WorkloadScheduling, group_names, job_gang
from webhook.workloads.templates import pod_templates, replace_at

__all__ = [
    "KUEUE_PODSET_ANNOTATIONS",
    "KUEUE_QUEUE_LABEL",
    "WORKLOAD_POD_LABELS",
    "Together",
    "keep_together",
    "level_warning",
]

KUEUE_QUEUE_LABEL: Final = "kueue.x-k8s.io/queue-name"
_KUEUE = "kueue.x-k8s.io/"
KUEUE_REQUIRED: Final = _KUEUE + "podset-required-topology"
KUEUE_PREFERRED: Final = _KUEUE + "podset-preferred-topology"
KUEUE_SLICE_REQUIRED: Final = _KUEUE + "podset-slice-required-topology"
KUEUE_SLICE_SIZE: Final = _KUEUE + "podset-slice-size"
KUEUE_PODSET_ANNOTATIONS: Final = (
    KUEUE_REQUIRED,
    KUEUE_PREFERRED,
    KUEUE_SLICE_REQUIRED,
    KUEUE_SLICE_SIZE,
)
JOBSET_EXCLUSIVE: Final = "alpha.jobset.sigs.k8s.io/exclusive-topology"
LWS_EXCLUSIVE: Final = "leaderworkerset.sigs.k8s.io/exclusive-topology"

# kind -> the label its controller puts on every pod, valued with the workload's name. In the
# order a pod is matched to its workload (webhook/spans): a JobSet's pods carry their child
# Job's label too, and an LWS's its own, so the outer workloads come first.
WORKLOAD_POD_LABELS: Final[dict[str, str]] = {
    "LeaderWorkerSet": "leaderworkerset.sigs.k8s.io/name",
    "JobSet": "jobset.sigs.k8s.io/jobset-name",
    **{
        kind: "training.kubeflow.org/job-name"
        for kind in ("PyTorchJob", "TFJob", "MPIJob", "XGBoostJob", "PaddleJob", "JAXJob")
    },
    "Job": "batch.kubernetes.io/job-name",
}
_PREFERRED_WEIGHT: Final = 100


@dataclass(frozen=True, slots=True)
class Together:
    obj: dict[str, Any]
    how: str  # "kueue", "podgroup", "exclusive-topology", "pod-affinity" or "none"
    warnings: list[str] = field(default_factory=list)


def level_warning(where: str, rule: KeepTogether) -> str:
    """The level names a label no node carries: the rule cannot be met anywhere."""
    outcome = (
        "its pods stay Pending" if rule.mode == "required" else "its pods are not kept together"
    )
    return (
        f"topoplace: {where}: keepTogether level {rule.level}: no node carries "
        f"{rule.label_key}, so {outcome} (docs/network-position.md)"
    )


def keep_together(
    obj: dict[str, Any], rule: KeepTogether, scheduling: WorkloadScheduling | None = None
) -> Together:
    """`obj` with what keeps its pods together at `rule.level`; the input is untouched.

    `scheduling`: what the cluster serves (discovery); None keeps the mechanisms that need
    no Workload API, and says nothing about them.
    """
    meta = _v if isinstance(_v := obj.get("metadata"), dict) else {}
    labels = _v if isinstance(_v := meta.get("labels"), dict) else {}
    kind = obj.get("kind")
    if labels.get(KUEUE_QUEUE_LABEL):
        return _kueue(obj, rule)
    pods = [t.pod for t in pod_templates(obj)]
    groups = group_names(pods)
    if groups:
        ungrouped = len(pods) - sum(1 for p in pods if group_names([p]))
        return _named_groups(obj, groups + ["no group"] * min(ungrouped, 1), scheduling)
    if kind == "Job" and rule.mode == "required" and _gang_job(obj, scheduling):
        after, warnings = job_gang(obj, rule)
        return Together(after, "podgroup", warnings)
    if kind == "LeaderWorkerSet":
        return _exclusive(obj, rule, LWS_EXCLUSIVE)
    if kind == "JobSet" and _single_child_job(obj):
        return _exclusive(obj, rule, JOBSET_EXCLUSIVE)
    name = meta.get("name")
    pod_label = WORKLOAD_POD_LABELS.get(str(kind))
    if pod_label is None or not isinstance(name, str) or not name:
        why = "its name is not known yet (generateName)" if pod_label else f"a {kind}"
        return Together(obj, "none", [f"keepTogether: cannot keep the pods of {why} together"])
    together = _affinity(obj, rule, pod_label, name)
    if scheduling is None or kind != "Job":
        return together
    why = (
        "a PodGroup's topology constraint is required only, the rule preferred"
        if rule.mode == "preferred"
        else scheduling.lacking(jobs=True)
    )
    weak = f"keepTogether: by the first pod's affinity, not a PodGroup ({why})"
    return Together(together.obj, together.how, [*together.warnings, weak])


def _gang_job(job: dict[str, Any], scheduling: WorkloadScheduling | None) -> bool:
    """The Job controller will make this Job's PodGroup: the cluster says so, or (not known
    yet) the user already asked for one in spec.scheduling."""
    if scheduling is not None:
        return scheduling.jobs
    spec = job.get("spec")
    return isinstance(spec, dict) and isinstance(spec.get("scheduling"), dict)


def _named_groups(
    obj: dict[str, Any], groups: list[str], scheduling: WorkloadScheduling | None
) -> Together:
    """Pods that name their PodGroup: the group keeps them; nothing is added here."""
    if len(groups) > 1:
        return Together(
            obj,
            "none",
            [
                f"keepTogether: its pods name {len(groups)} PodGroups ({', '.join(groups[:3])}); "
                "one group's constraint cannot keep them together: left as written"
            ],
        )
    if scheduling is not None and not scheduling.pod_groups:
        why = scheduling.lacking(jobs=False)
        return Together(
            obj, "none", [f"keepTogether: PodGroup {groups[0]} cannot keep its pods ({why})"]
        )
    return Together(obj, "podgroup")


def _kueue(obj: dict[str, Any], rule: KeepTogether) -> Together:
    key = rule.label_key
    if rule.slice_size is not None:
        wanted = {
            KUEUE_PREFERRED: key,
            KUEUE_SLICE_REQUIRED: key,
            KUEUE_SLICE_SIZE: str(rule.slice_size),
        }
    else:
        wanted = {KUEUE_REQUIRED if rule.mode == "required" else KUEUE_PREFERRED: key}
    after, warnings = obj, []
    for template in pod_templates(obj):
        annotations = _annotations(template.pod)
        if any(k in annotations for k in KUEUE_PODSET_ANNOTATIONS):
            if {k: annotations.get(k) for k in wanted} != wanted:
                warnings.append(
                    f"{template.where}: keepTogether: the template's own Kueue topology "
                    "annotations are kept"
                )
            continue
        pod = _with_annotations(template.pod, wanted)
        after = replace_at(after, template.path, pod)
    return Together(after, "kueue", warnings)


def _exclusive(obj: dict[str, Any], rule: KeepTogether, annotation: str) -> Together:
    warnings = []
    if rule.mode == "preferred":
        warnings.append(
            f"keepTogether: {obj.get('kind')} exclusive-topology is required, not preferred: "
            "each group waits for a domain of its own"
        )
    annotations = _annotations(obj)
    if annotation in annotations:
        if annotations[annotation] != rule.label_key:
            warnings.append(f"keepTogether: the workload's own {annotation} is kept")
        return Together(obj, "exclusive-topology", warnings)
    return Together(
        _with_annotations(obj, {annotation: rule.label_key}), "exclusive-topology", warnings
    )


def _affinity(obj: dict[str, Any], rule: KeepTogether, pod_label: str, name: str) -> Together:
    term = {"labelSelector": {"matchLabels": {pod_label: name}}, "topologyKey": rule.label_key}
    after = obj
    for template in pod_templates(obj):
        spec = template.pod.get("spec") or {}
        affinity = dict(spec.get("affinity") or {})
        pod_affinity = dict(affinity.get("podAffinity") or {})
        entry: dict[str, Any]
        if rule.mode == "required":
            slot, entry = "requiredDuringSchedulingIgnoredDuringExecution", term
        else:
            slot = "preferredDuringSchedulingIgnoredDuringExecution"
            entry = {"weight": _PREFERRED_WEIGHT, "podAffinityTerm": term}
        existing = list(pod_affinity.get(slot) or [])
        if entry in existing:
            continue  # idempotent: already there
        pod_affinity[slot] = [*existing, entry]
        affinity["podAffinity"] = pod_affinity
        pod = {**template.pod, "spec": {**spec, "affinity": affinity}}
        after = replace_at(after, template.path, pod)
    return Together(after, "pod-affinity")


def _single_child_job(obj: dict[str, Any]) -> bool:
    jobs = (obj.get("spec") or {}).get("replicatedJobs") or []
    return len(jobs) == 1 and isinstance(jobs[0], dict) and jobs[0].get("replicas", 1) == 1


def _annotations(pod: dict[str, Any]) -> dict[str, Any]:
    meta = pod.get("metadata")
    annotations = meta.get("annotations") if isinstance(meta, dict) else None
    return annotations if isinstance(annotations, dict) else {}


def _with_annotations(obj: dict[str, Any], added: dict[str, str]) -> dict[str, Any]:
    meta = _v if isinstance(_v := obj.get("metadata"), dict) else {}
    return {**obj, "metadata": {**meta, "annotations": {**_annotations(obj), **added}}}
