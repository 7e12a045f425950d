"""keepTogether through Kubernetes' own gang and topology-aware scheduling (v1.37). (pure)

Upstream (kubernetes v1.37.2, read from its source):
- `scheduling.k8s.io/v1beta1` PodGroup (gate `GenericWorkload`, beta, off by default; the API
  itself off unless `--runtime-config` turns it on): `spec.schedulingPolicy` is `basic` or
  `gang: {minCount}`; `spec.schedulingConstraints.topology: [{key}]` (at most one; gate
  `TopologyAwareWorkloadScheduling`, alpha) makes kube-scheduler try the group per domain of
  the key and keep all its pods in one. Nodes without the key are in no domain. The
  constraint is immutable and dropped at CREATE when its gate is off, so it is set at CREATE.
- A Pod names its group in `spec.schedulingGroup.podGroupName`.
- The Job controller (gate `WorkloadWithJob`, alpha) compiles a Job's `spec.scheduling`
  (`schedulingPolicy`, `schedulingConstraints`; immutable; dropped at CREATE when the gate is
  off) into a Workload and one PodGroup, and names it in the pods it creates; a gang without
  `minCount` gets the Job's parallelism. A template that already names a group is left to it.

So a Job gets `spec.scheduling` (gang, topology on the level's key); a PodGroup that carries
the policy label gets the same on itself. `preferred` has no upstream counterpart (the
constraint is required only): it keeps the preferred pod affinity.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

from webhook.policy.model import KeepTogether

__all__ = [
    "GATES",
    "POD_GROUP",
    "WorkloadScheduling",
    "group_names",
    "job_gang",
    "mechanisms",
    "parse_gates",
    "parse_resources",
    "pod_group_gang",
]

GROUP_VERSION: Final = "scheduling.k8s.io/v1beta1"
POD_GROUP: Final = ("scheduling.k8s.io", "PodGroup")
GATES: Final = ("GenericWorkload", "TopologyAwareWorkloadScheduling", "WorkloadWithJob")
_GANG_GATES: Final = GATES[:2]
# `kubernetes_feature_enabled{name="X",stage="BETA"} 1` (component-base feature metrics).
_GATE_LINE = re.compile(r'^kubernetes_feature_enabled\{[^}]*\bname="([A-Za-z0-9]+)"[^}]*\}\s+(\S+)')


@dataclass(frozen=True, slots=True)
class WorkloadScheduling:
    """What the cluster serves: the v1beta1 resources and the API server's gates.

    None: not known (no answer yet, or no right to read the API server's /metrics); the
    webhook then keeps today's mechanisms.
    """

    resources: frozenset[str] | None = None
    gates: Mapping[str, bool] | None = None

    @property
    def pod_groups(self) -> bool:
        """PodGroups with a topology constraint are served and honoured."""
        return self._lacking(jobs=False) is None

    @property
    def jobs(self) -> bool:
        """The Job controller also turns a Job's spec.scheduling into its PodGroup."""
        return self._lacking(jobs=True) is None

    def lacking(self, *, jobs: bool) -> str:
        """Why PodGroups do not keep a workload together here ("" when they do)."""
        return self._lacking(jobs=jobs) or ""

    def _lacking(self, *, jobs: bool) -> str | None:
        if self.resources is None:
            return f"whether the cluster serves {GROUP_VERSION} is not known yet"
        if "podgroups" not in self.resources:
            return f"the cluster does not serve {GROUP_VERSION} podgroups"
        if self.gates is None:
            return "the API server's feature gates are not known (no read of its /metrics)"
        wanted = GATES if jobs else _GANG_GATES
        off = [g for g in wanted if not self.gates.get(g, False)]
        return f"feature gate {', '.join(off)} off" if off else None

    def describe(self) -> str:
        served = (
            "unknown"
            if self.resources is None
            else ("served" if "podgroups" in self.resources else "not served")
        )
        gates = (
            "unknown"
            if self.gates is None
            else ", ".join(f"{g} {'on' if self.gates.get(g) else 'off'}" for g in GATES)
        )
        return f"{GROUP_VERSION} podgroups {served}; gates {gates}"


def mechanisms(rule: KeepTogether, scheduling: WorkloadScheduling | None) -> str:
    """Which mechanism keeps each kind of workload together under `rule`, on this cluster
    (None: not looked at), for `validate` and the docs."""
    if rule.mode == "preferred":
        job = "the first pod's preferred affinity (a PodGroup's constraint is required only)"
    elif scheduling is None:
        job = (
            f"a gang PodGroup (spec.scheduling) where the cluster serves {GROUP_VERSION} with "
            f"gates {', '.join(GATES)} on, else the first pod's affinity"
        )
    elif scheduling.jobs:
        job = "a gang PodGroup in one domain (spec.scheduling; the Job controller writes it)"
    else:
        job = f"the first pod's affinity ({scheduling.lacking(jobs=True)})"
    return (
        f"keepTogether {rule.level} ({rule.mode}): a workload naming a Kueue queue: Kueue's "
        f"topology annotations; a Job: {job}; a LeaderWorkerSet or a JobSet of one Job: "
        "exclusive-topology; pods naming a PodGroup: that PodGroup when it carries the policy "
        "label; other workloads: the first pod's affinity"
    )


def parse_resources(body: Any) -> frozenset[str]:
    """The resource names of an APIResourceList (GET /apis/scheduling.k8s.io/v1beta1)."""
    items = body.get("resources") if isinstance(body, dict) else None
    if not isinstance(items, list):
        return frozenset()
    return frozenset(
        r["name"] for r in items if isinstance(r, dict) and isinstance(r.get("name"), str)
    )


def parse_gates(text: str) -> dict[str, bool]:
    """Our gates from the API server's /metrics text; a gate it does not list is absent."""
    found: dict[str, bool] = {}
    for line in text.splitlines():
        match = _GATE_LINE.match(line)
        if match and match.group(1) in GATES:
            found[match.group(1)] = match.group(2) in ("1", "1.0", "+Inf")
    return found


def group_names(templates: list[dict[str, Any]]) -> list[str]:
    """The PodGroups the pods of `templates` name, in order, each once."""
    names: list[str] = []
    for pod in templates:
        group = _dig(pod, "spec", "schedulingGroup", "podGroupName")
        if isinstance(group, str) and group and group not in names:
            names.append(group)
    return names


def job_gang(job: dict[str, Any], rule: KeepTogether) -> tuple[dict[str, Any], list[str]]:
    """The Job with spec.scheduling asking for a gang in one domain of the level; a user's
    own policy or constraint is kept (with a warning when it is not the level's)."""
    spec = _v if isinstance(_v := job.get("spec"), dict) else {}
    own = spec.get("scheduling")
    merged, warnings = _merged(
        own if isinstance(own, dict) else {}, rule, "spec.scheduling", gang={}
    )
    return {**job, "spec": {**spec, "scheduling": merged}}, warnings


def pod_group_gang(group: dict[str, Any], rule: KeepTogether) -> tuple[dict[str, Any], list[str]]:
    """The PodGroup with the topology constraint on the level's key (the API requires its
    schedulingPolicy; a `basic` one is kept, with a warning: not all-or-nothing)."""
    spec = _v if isinstance(_v := group.get("spec"), dict) else {}
    merged, warnings = _merged(spec, rule, "spec", gang=None)
    policy = spec.get("schedulingPolicy")
    if isinstance(policy, dict) and "basic" in policy and "gang" not in policy:
        warnings.append(
            "keepTogether: the PodGroup's schedulingPolicy basic is kept: its pods are kept "
            "in one domain but not scheduled all-or-nothing"
        )
    return {**group, "spec": merged}, warnings


def _merged(
    block: dict[str, Any], rule: KeepTogether, where: str, *, gang: dict[str, Any] | None
) -> tuple[dict[str, Any], list[str]]:
    out, warnings = dict(block), []
    if gang is not None and not isinstance(out.get("schedulingPolicy"), dict):
        out["schedulingPolicy"] = {"gang": gang}  # minCount: the Job's parallelism
    constraints = out.get("schedulingConstraints")
    constraints = constraints if isinstance(constraints, dict) else {}
    topology = constraints.get("topology")
    if isinstance(topology, list) and topology:
        keys = [t.get("key") for t in topology if isinstance(t, dict)]
        if keys != [rule.label_key]:
            warnings.append(
                f"keepTogether: {where}.schedulingConstraints.topology the workload sets "
                f"({', '.join(map(str, keys))}) is kept, not {rule.label_key}"
            )
        return out, warnings
    out["schedulingConstraints"] = {**constraints, "topology": [{"key": rule.label_key}]}
    return out, warnings


def _dig(obj: Any, *path: str) -> Any:
    for part in path:
        obj = obj.get(part) if isinstance(obj, dict) else None
    return obj
