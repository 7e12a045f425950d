"""The bit-mask index (the webhook's node cache) agrees with the per-node verdicts of
`explain` (the warning it words: tests/webhook/warnings)."""

from __future__ import annotations

import copy
from collections import Counter
from typing import Any

import pytest

from tests.webhook.nodefit.conftest import POLICIES
from webhook.engine.recipe import mutate
from webhook.nodefit.checks import plan_for
from webhook.nodefit.node_index import NodeIndex
from webhook.nodefit.node_verdict import evaluate
from webhook.placement_model.filters.nodes import NodeView
from webhook.policy.loader import load_policy_dir

POLICY_SET = load_policy_dir(POLICIES)


def gpu_pod(policy: str, gpus: int, **spec: Any) -> dict[str, Any]:
    container = {
        "name": "trainer",
        "image": "pytorch:2.8",
        "resources": {"limits": {"nvidia.com/gpu": gpus}},
    }
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "p", "labels": {"topoplace.io/policy": policy}},
        "spec": {"containers": [container], **spec},
    }


def variants(nodes: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The fleet plus nodes that exercise the other checks: cordoned, NoExecute-tainted,
    and one written by hand without status."""
    more = copy.deepcopy(nodes[:3])
    more[0]["metadata"]["name"] = "cordoned"
    more[0]["spec"] = {"unschedulable": True}
    more[1]["metadata"]["name"] = "evicting"
    more[1]["spec"] = {"taints": [{"key": "dedicated", "value": "infer", "effect": "NoExecute"}]}
    more[2]["metadata"]["name"] = "hand-written"
    del more[2]["status"]  # no allocatable: resources not checked
    return nodes + more


TOLERATE_ALL = [{"operator": "Exists"}]
AFFINITY = {
    "nodeAffinity": {
        "requiredDuringSchedulingIgnoredDuringExecution": {
            "nodeSelectorTerms": [
                {
                    "matchExpressions": [
                        {"key": "topoplace.io/rdma-nics", "operator": "NotIn", "values": ["9"]},
                        {"key": "topoplace.io/gpus", "operator": "Lt", "values": ["9"]},
                    ]
                },
                {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["x"]}]},
            ]
        }
    }
}
PODS = [
    (policy, gpus, extra)
    for policy in ("ddp-hgx-full-node", "single-numa-partial", "inference")
    for gpus in (1, 2, 4, 8)
    for extra in ({}, {"tolerations": TOLERATE_ALL}, {"affinity": AFFINITY})
]


@pytest.mark.parametrize(("policy", "gpus", "extra"), PODS)
def test_masks_agree_with_per_node_verdicts(
    policy: str, gpus: int, extra: dict[str, Any], nodes: list[dict[str, Any]]
) -> None:
    views = [NodeView.from_object(n) for n in variants(nodes)]
    result = mutate(gpu_pod(policy, gpus, **extra), "ml-team", POLICY_SET)
    plan = plan_for(result.pod, result.applied)
    verdicts = [evaluate(plan, v) for v in views]
    assessment = NodeIndex(views).assess(plan)
    assert assessment.fitting == sum(v.fits for v in verdicts)
    by_mask = {m.check.group: m.nodes for m in assessment.misses}
    by_node = Counter(v.check for v in verdicts if not v.fits)
    assert by_mask == dict(by_node)


def test_updates_and_removals_keep_the_index_exact(nodes: list[dict[str, Any]]) -> None:
    views = [NodeView.from_object(n) for n in nodes]
    index = NodeIndex(views)
    result = mutate(gpu_pod("ddp-hgx-full-node", 8), "ml-team", POLICY_SET)
    plan = plan_for(result.pod, POLICY_SET.get("ddp-hgx-full-node"))
    assert index.assess(plan).fitting == 2
    for view in views:
        if view.name.startswith("dgx-h100-") and view.name != "dgx-h100-tainted":
            labels = {**view.labels, "topoplace.io/gpu-nic-link": "NODE"}
            assert index.upsert(NodeView(view.name, labels, view.allocatable))
    assert not index.upsert(index.views()[-1])  # nothing changed: nothing to do
    assert index.assess(plan).fitting == 0
    for view in views:
        index.remove(view.name)
    assert len(index) == 0 and index.all == 0
    assert index.upsert(views[0]) and len(index) == 1
