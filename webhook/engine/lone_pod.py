"""keepTogether seen from one pod: a pod no controller owns has no peers to be kept with.

The workload path (webhook/workloads/together.py) does the keeping; a pod of a Job, JobSet,
Kubeflow job or LeaderWorkerSet is owned by it, and a pod naming its PodGroup is kept by that
group: neither says anything here.
"""

from __future__ import annotations

from typing import Any

from webhook.policy.model import PlacementPolicy

__all__ = ["lone_pod_warning"]


def lone_pod_warning(pod: dict[str, Any], policy: PlacementPolicy) -> str | None:
    rule = policy.spec.placement.keep_together
    if rule is None or pod.get("kind") != "Pod":
        return None  # no rule, or a pod template (its workload is kept together)
    if (pod.get("metadata") or {}).get("ownerReferences"):
        return None
    spec = pod.get("spec")
    if isinstance(spec, dict) and spec.get("schedulingGroup"):
        return None  # its PodGroup keeps it with its peers (webhook/workloads/gangs.py)
    return (
        f"keepTogether ({rule.level}) cannot keep a lone pod with others: put policy "
        f"{policy.name} on a Job, JobSet, Kubeflow job or LeaderWorkerSet"
    )
