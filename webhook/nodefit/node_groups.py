"""Nodes alike for one pod, so `explain` judges one node per group (issue 34: 5,000 nodes).

Two nodes get the same verdict, but for the name, when everything `evaluate` reads of them is
equal: the labels the pod's checks and preferred terms name, every label the agent owns (the
agent check, the kubelet model and the pairs verdict read those), allocatable, what bound
pods use, taints, cordon, and the hardware parsed from the annotation. The name joins the
key only when the pod names nodes (nodeName, matchFields). A fleet's per-node labels (the
hostname, a rack) then split no group unless the pod selects on them.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable

from common.vocabulary import DATASET_PREFIX, LABEL_PREFIX
from webhook.nodefit.checks import PodPlan
from webhook.placement_model.filters.nodes import NodeView
from webhook.placement_model.filters.selectors import Term

__all__ = ["alike_key"]

_OWNED = (LABEL_PREFIX, DATASET_PREFIX)  # common.vocabulary.is_owned_key, inlined: per label


def _term_keys(term: Term) -> tuple[set[str], bool]:
    return {r.key for r in term.expressions}, bool(term.fields)


def _named(plan: PodPlan) -> tuple[frozenset[str], bool]:
    """The label keys the plan reads, and whether it reads node names."""
    keys: set[str] = set()
    names = False
    terms: list[Term] = [p.term for p in plan.preferred]
    for check in plan.checks:
        names |= check.kind == "name"
        if check.requirement is not None:
            keys.add(check.requirement.key)
            names |= check.requirement.field
        keys.update(k for k, _ in check.selector)
        terms.extend(check.terms)
    for term in terms:
        more, fields = _term_keys(term)
        keys |= more
        names |= fields
    return frozenset(keys), names


def alike_key(plan: PodPlan) -> Callable[[NodeView], Hashable]:
    """The grouping key of a node for `plan`'s verdict (see the module docstring)."""
    keys, names = _named(plan)

    def key(node: NodeView) -> Hashable:
        labels = tuple(
            sorted((k, v) for k, v in node.labels.items() if k in keys or k.startswith(_OWNED))
        )
        return (
            node.name if names else None,
            labels,
            _items(node.allocatable.items()),
            _items(node.used.items()),
            node.pods,
            node.taints,
            node.unschedulable,
            node.resources_known,
            node.numa,
            node.pairing,
        )

    return key


def _items(pairs: Iterable[tuple[str, int]]) -> tuple[tuple[str, int], ...]:
    return tuple(sorted(pairs))
