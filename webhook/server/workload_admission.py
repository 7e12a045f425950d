"""Admission of workloads (Job, JobSet, Kubeflow jobs, LeaderWorkerSet) and PodGroups at CREATE.

A wrapper around the pod `Admitter`: a CREATE of one of `WORKLOAD_KINDS` is answered here,
everything else goes to the pod admitter unchanged, so the pod path pays one dict lookup.

CREATE only: a queue (Kueue) updates suspended Jobs when it admits them, and we never fight
it. Nothing here refuses a workload for its shape: the API server has validated the built-in
kinds, and a template we cannot read (a CRD's loose schema) is admitted unchanged with a
warning. Only a policy's own verdict refuses (onMissing: deny, --on-missing-policy deny), as
it would refuse each pod. An unexpected engine exception fails open, as for pods.
A PodGroup (scheduling.k8s.io/v1beta1) with the policy label gets the keepTogether
constraint (webhook/workloads/gangs.py); it is never refused.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from webhook.engine.outcome import EngineSettings
from webhook.policy.loader import PolicySet
from webhook.server.pod_admission import (
    FAILED_OPEN_WARNED,
    Admission,
    Admitter,
    Outcome,
    build_response,
    engine_kinds,
)
from webhook.server.review import ReviewRequest
from webhook.warnings.kinds import WarningKind
from webhook.workloads.gangs import POD_GROUP, WorkloadScheduling
from webhook.workloads.mutation import (
    WORKLOAD_KINDS,
    WorkloadMutation,
    mutate_pod_group,
    mutate_workload,
)
from webhook.workloads.together import level_warning

__all__ = ["WorkloadAdmitter"]

logger = logging.getLogger(__name__)

_EMPTY = PolicySet()
# kind name -> API groups: the pod path checks the name only (one lookup, "Pod" misses).
_GROUPS: dict[str, frozenset[str]] = {}
for _group, _kind in (*WORKLOAD_KINDS, POD_GROUP):
    _GROUPS[_kind] = _GROUPS.get(_kind, frozenset()) | {_group}


class WorkloadAdmitter:
    """Mutates the pod templates of workloads; hands every other request to `pods`."""

    def __init__(
        self,
        pods: Admitter,
        policies: Callable[[], PolicySet | None],
        settings: EngineSettings,
        *,
        carries: Callable[[str], bool | None] | None = None,
        scheduling: Callable[[], WorkloadScheduling | None] | None = None,
    ) -> None:
        self.pods = pods  # public: the pod path (tests read its answer cache)
        self._policies = policies
        self._settings = settings
        # Whether some node carries a label (the node cache; None: not known yet).
        self._carries = carries
        # What the cluster serves for gangs (webhook/scheduler/workload_api.py; None: unknown).
        self._scheduling = scheduling or (lambda: None)

    def admit(self, request: ReviewRequest) -> Admission:
        groups = _GROUPS.get(request.kind["kind"])
        if (
            groups is None
            or request.operation != "CREATE"
            or request.kind["group"] not in groups
            or request.object is None
        ):
            return self.pods.admit(request)
        return self._admit(request, request.object)

    def _admit(self, request: ReviewRequest, obj: dict[str, Any]) -> Admission:
        uid = request.uid
        meta = obj.get("metadata")
        meta = meta if isinstance(meta, dict) else {}
        namespace = request.namespace or str(meta.get("namespace") or "")
        name = meta.get("name") or meta.get("generateName") or request.name
        label = f"{request.kind['kind']}/{name if isinstance(name, str) else ''}"
        policies = self._policies() or _EMPTY
        try:
            result = self._mutate(request, obj, namespace, policies, label)
        except Exception:
            logger.exception(
                "workload mutation failed; admitting it unchanged",
                extra={"uid": uid, "namespace": namespace, "workload": label},
            )
            warning = f"internal error applying a placement policy to {label}; admitted unchanged"
            review = build_response(uid, warnings=[warning])
            return Admission(
                review, "failed_open", None, 0, label, namespace, warned=FAILED_OPEN_WARNED
            )
        warned = engine_kinds(result.warnings)
        if result.templates == 0:  # nothing opted in (or nothing readable did)
            review = build_response(uid, warnings=result.warnings)
            return Admission(review, "passthrough", None, 0, label, namespace, warned=warned)
        if result.denials:
            review = build_response(
                uid,
                allowed=False,
                warnings=result.warnings,
                status_message="; ".join(result.denials),
            )
            return Admission(review, "denied", result.policy, 0, label, namespace, warned=warned)
        level = self._level_warnings(policies, result.policy, label)
        review = build_response(uid, patch=result.patch, warnings=result.warnings + level)
        outcome: Outcome = "mutated" if result.patch else "unchanged"
        warned += (WarningKind.KEEP_TOGETHER,) * len(level)
        ops = len(result.patch)
        return Admission(review, outcome, result.policy, ops, label, namespace, warned=warned)

    def _mutate(
        self,
        request: ReviewRequest,
        obj: dict[str, Any],
        namespace: str,
        policies: PolicySet,
        label: str,
    ) -> WorkloadMutation:
        scheduling = self._scheduling()
        if (request.kind["group"], request.kind["kind"]) == POD_GROUP:
            return mutate_pod_group(obj, policies, scheduling, label=label)
        return mutate_workload(obj, namespace, policies, self._settings, scheduling=scheduling)

    def _level_warnings(self, policies: PolicySet, name: str | None, label: str) -> list[str]:
        policy = policies.get(name) if name is not None else None
        rule = policy.spec.placement.keep_together if policy is not None else None
        if rule is None or self._carries is None or self._carries(rule.label_key) is not False:
            return []
        return [level_warning(label, rule)]
