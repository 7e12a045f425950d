"""The warnings judged from the nodes' hardware and labels (the node cache's index): no node
fits; matching nodes whose kubelets would refuse the pod; GPU↔NIC pairs not guaranteed.

"no node fits placement policy ddp-h100 for 8 GPUs: 12 nodes fail gpu-nic-link (NODE),
3 fail topology-manager-policy (none); run `kubectl topoplace explain`"

Each gives `Parts`; `fit` (lines.py) shortens them, keeping the pointer to explain.
"""

from __future__ import annotations

from collections.abc import Sequence

from webhook.nodefit.checks import PodPlan
from webhook.nodefit.node_masks import Assessment, Miss
from webhook.nodefit.pairs_check import PairsVerdict
from webhook.placement_model.requests import format_amount
from webhook.warnings.kinds import WarningKind
from webhook.warnings.lines import EXPLAIN, MORE, Parts

__all__ = ["PairsGroup", "kubelet_refusal_warning", "no_fit_warning", "pairs_warning"]

# One group of alike nodes the pod fits: their pairs verdict, how many, the first few names.
PairsGroup = tuple[PairsVerdict, int, Sequence[str]]
_VALUES = 3  # values and names shown before `…`


def _gpus(plan: PodPlan) -> str:
    return f" for {plan.gpus} GPU{'s' if plan.gpus != 1 else ''}" if plan.gpus else ""


def _values(miss: Miss) -> str:
    values = list(miss.values)
    if miss.check.kind == "resource":
        values = [format_amount(miss.check.resource, int(v)) for v in values]
    if not values:
        return ""
    shown = ", ".join(values[:_VALUES]) + (f", {MORE}" if len(values) > _VALUES else "")
    return f" ({shown})"


def _part(miss: Miss, first: bool) -> str:
    count = f"{miss.nodes} node{'s' if miss.nodes != 1 else ''}" if first else str(miss.nodes)
    if miss.check.kind == "agent":
        return f"{count} lack topoplace labels"
    return f"{count} fail {miss.check.group}{_values(miss)}"


def no_fit_warning(plan: PodPlan, assessment: Assessment, total: int) -> Parts | None:
    """When no node fits (None when some node does or there are no nodes): the checks that
    fail on most nodes first."""
    if assessment.fitting or not total or plan.policy is None:
        return None
    misses = sorted(assessment.misses, key=lambda m: -m.nodes)
    return Parts(
        kind=WarningKind.NO_FIT,
        head=f"no node fits placement policy {plan.policy}{_gpus(plan)}: ",
        items=tuple(_part(miss, first=not i) for i, miss in enumerate(misses)),
        tail=EXPLAIN,
    )


def kubelet_refusal_warning(plan: PodPlan, refusing: Sequence[str]) -> Parts | None:
    """When kube-scheduler may bind the pod where its kubelet must refuse it."""
    if not refusing or plan.policy is None:
        return None
    many = len(refusing) != 1
    return Parts(
        kind=WarningKind.KUBELET_REFUSAL,
        head=f"placement policy {plan.policy}: the kubelet{'s' if many else ''} of "
        f"{len(refusing)} matching node{'s' if many else ''}",
        items=tuple(refusing[:_VALUES]),
        more=len(refusing) > _VALUES,
        bracketed=True,
        after=" would refuse this pod (TopologyAffinityError), and kube-scheduler may still "
        "bind it there",
        tail=EXPLAIN,
    )


def pairs_warning(plan: PodPlan, groups: Sequence[PairsGroup]) -> Parts | None:
    """When GPU↔NIC pairs the policy asks for are not guaranteed on every node the pod fits:
    the reason of the largest failing group."""
    failing = sorted((g for g in groups if not g[0].guaranteed), key=lambda g: -g[1])
    if not failing or plan.policy is None:
        return None
    verdict = failing[0][0]
    names = [name for _, _, shown in failing for name in shown]
    bad, total = sum(g[1] for g in failing), sum(g[1] for g in groups)
    return Parts(
        kind=WarningKind.PAIRS,
        head=f"placement policy {plan.policy}{_gpus(plan)}: GPU↔NIC pairs not guaranteed on "
        f"{bad} of {total} node{'s' if total != 1 else ''} it fits",
        items=tuple(names[:_VALUES]),
        more=bad > min(len(names), _VALUES),
        bracketed=True,
        after=f": {verdict.facts}" + (f"; {verdict.remedy}" if verdict.remedy else ""),
        tail=EXPLAIN,
    )
