"""The admission warning for a pod that fits no node, within the API server's 256 characters.

"no node fits placement policy ddp-h100 for 8 GPUs: 12 nodes fail gpu-nic-link (NODE),
3 fail topology-manager-policy (none); run `kubectl topoplace explain`"
"""

from __future__ import annotations

from webhook.explain.checks import PodPlan
from webhook.explain.index import Assessment, Miss
from webhook.explain.pairs.verdict import PairsVerdict
from webhook.topology.requests import format_amount

__all__ = ["LIMIT", "kubelet_refusal_warning", "no_fit_warning", "pairs_warning"]

LIMIT = 256
_TAIL = "; run `kubectl topoplace explain`"
_VALUES = 3


def _values(miss: Miss) -> str:
    values = list(miss.values)
    if miss.check.kind == "resource":
        values = [format_amount(miss.check.resource, int(v)) for v in values]
    if not values:
        return ""
    shown = ", ".join(values[:_VALUES]) + (", …" if len(values) > _VALUES else "")
    return f" ({shown})"


def _part(miss: Miss, first: bool) -> str:
    count = f"{miss.nodes} node{'s' if miss.nodes != 1 else ''}" if first else str(miss.nodes)
    if miss.check.kind == "agent":
        return f"{count} lack topoplace labels"
    return f"{count} fail {miss.check.group}{_values(miss)}"


def no_fit_warning(plan: PodPlan, assessment: Assessment, total: int) -> str | None:
    """The warning when no node fits (None when some node does or there are no nodes)."""
    if assessment.fitting or not total or plan.policy is None:
        return None
    gpus = f" for {plan.gpus} GPU{'s' if plan.gpus != 1 else ''}" if plan.gpus else ""
    head = f"no node fits placement policy {plan.policy}{gpus}: "
    misses = sorted(assessment.misses, key=lambda m: -m.nodes)
    parts: list[str] = []
    for index, miss in enumerate(misses):
        part = _part(miss, first=not parts)
        more = ", …" if index + 1 < len(misses) else ""
        if len(head) + len(", ".join([*parts, part])) + len(more) + len(_TAIL) > LIMIT:
            parts.append("…")
            break
        parts.append(part)
    text = head + ", ".join(parts) + _TAIL
    return text if len(text) <= LIMIT else text[: LIMIT - 1] + "…"


def kubelet_refusal_warning(plan: PodPlan, refusing: list[str]) -> str | None:
    """The warning when kube-scheduler may bind the pod where its kubelet must refuse it."""
    if not refusing or plan.policy is None:
        return None
    shown = ", ".join(refusing[:_VALUES]) + (", …" if len(refusing) > _VALUES else "")
    many = len(refusing) != 1
    text = (
        f"placement policy {plan.policy}: the kubelet{'s' if many else ''} of "
        f"{len(refusing)} matching node{'s' if many else ''} ({shown}) would refuse this pod "
        "(TopologyAffinityError), and kube-scheduler may still bind it there" + _TAIL
    )
    return text if len(text) <= LIMIT else text[: LIMIT - 1] + "…"


def pairs_warning(plan: PodPlan, groups: list[tuple[PairsVerdict, int, list[str]]]) -> str | None:
    """The warning when GPU↔NIC pairs the policy asks for are not guaranteed on every node the
    pod fits. `groups`: the verdict for each group of alike nodes, their count and names."""
    failing = sorted((g for g in groups if not g[0].guaranteed), key=lambda g: -g[1])
    if not failing or plan.policy is None:
        return None
    verdict = failing[0][0]
    names = [name for _, _, shown in failing for name in shown]
    bad, total = sum(g[1] for g in failing), sum(g[1] for g in groups)
    shown = ", ".join(names[:_VALUES]) + (", …" if bad > min(len(names), _VALUES) else "")
    gpus = f" for {plan.gpus} GPU{'s' if plan.gpus != 1 else ''}" if plan.gpus else ""
    head = f"placement policy {plan.policy}{gpus}: GPU↔NIC pairs not guaranteed on "
    why = f": {verdict.facts}" + (f"; {verdict.remedy}" if verdict.remedy else "")
    where = f"{bad} of {total} node{'s' if total != 1 else ''} it fits"
    # The response puts `topoplace: ` before it (webhook/server/response.py) within the limit.
    budget = LIMIT - len("topoplace: ")
    for text in (f"{head}{where} ({shown}){why}", f"{head}{where}{why}"):
        if len(text) + len(_TAIL) <= budget:
            return text + _TAIL
        if len(text) <= budget:
            return text
    text = f"{head}{where}{why}"
    return text[: budget - 1] + "…"
