"""The kinds of admission warning the webhook sends: the one list, for the metric
`topoplace_webhook_admission_warnings_total{kind}` and whatever else sorts them.

Bounded on purpose (a label value): a warning's kind says which check gave it, never its
text. The engine's own notes about a pod or workload (resources raised, a dataset mount
moved, a template that cannot be read...) are one kind, `engine`; the placement warnings
(placement.py) each have theirs.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

__all__ = ["WarningKind", "WarningLine"]


class WarningKind(StrEnum):
    ENGINE = "engine"  # the mutation engine's notes (webhook/engine, webhook/workloads)
    NO_FIT = "no_fit"  # no node fits the policy
    KUBELET_REFUSAL = "kubelet_refusal"  # matching nodes' kubelets would refuse the pod
    NO_ROOM = "no_room"  # no fitting node has room on one NUMA node now
    PAIRS = "pairs"  # GPU↔NIC pairs not guaranteed where it fits
    SCHEDULER = "scheduler"  # the policy's scheduler is not running
    KEEP_TOGETHER = "keep_together"  # no node carries a workload's keepTogether label
    INTERNAL_ERROR = "internal_error"  # failed open: admitted unchanged after an error


@dataclass(frozen=True, slots=True)
class WarningLine:
    """A warning line as sent (`topoplace: ` and all, within the limit) and its kind."""

    kind: WarningKind
    line: str
