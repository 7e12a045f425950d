"""The bit-mask index (the webhook's node cache) agrees with the per-node verdicts of
`explain`, and the admission warning it words stays short and names the nearest misses."""

from __future__ import annotations

import copy
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from tests.webhook.explain.conftest import POLICIES
from webhook.engine.recipe import mutate
from webhook.explain.checks import plan_for
from webhook.explain.index import NodeIndex
from webhook.explain.nodes import NodeView
from webhook.explain.verdict import applied_policy, evaluate
from webhook.explain.warning import LIMIT, no_fit_warning
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
    plan = plan_for(result.pod, applied_policy(result.pod, result.policy, POLICY_SET))
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


def test_the_warning_names_the_nearest_misses_within_256_characters(
    nodes: list[dict[str, Any]],
) -> None:
    index = NodeIndex(NodeView.from_object(n) for n in nodes)
    result = mutate(gpu_pod("single-numa-partial", 8), "ml-team", POLICY_SET)
    plan = plan_for(result.pod, POLICY_SET.get("single-numa-partial"))
    warning = no_fit_warning(plan, index.assess(plan), len(index))
    assert warning is not None and len(warning) <= LIMIT
    assert warning.startswith("no node fits placement policy single-numa-partial for 8 GPUs: ")
    assert "fail gpu-nic-link (NODE, PHB, absent)" in warning
    assert "6 nodes fail max-gpus-per-numa-node (2, 4)" in warning
    assert "1 lack topoplace labels" in warning
    assert warning.endswith("run `kubectl topoplace explain`")


def test_a_long_warning_is_cut_not_overflowing(tmp_path: Path) -> None:
    # Many distinct failing checks: a policy with long required labels.
    keys = [f"example.com/requirement-with-a-long-name-{i}" for i in range(12)]
    labels = "\n".join(f"      {k}: yes-it-is" for k in keys)
    (tmp_path / "long.yaml").write_text(
        "apiVersion: topoplace.io/v1alpha1\nkind: PlacementPolicy\n"
        f"metadata: {{name: long}}\nspec:\n  placement:\n    requiredLabels:\n{labels}\n"
    )
    policies = load_policy_dir(tmp_path)
    views = [
        NodeView(f"n{i}", {**{k: "yes-it-is" for k in keys[:i]}, "topoplace.io/gpus": "8"}, {})
        for i in range(12)
    ]
    result = mutate(gpu_pod("long", 1), "default", policies)
    plan = plan_for(result.pod, policies.get("long"))
    warning = no_fit_warning(plan, NodeIndex(views).assess(plan), len(views))
    assert warning is not None and len(warning) <= LIMIT and "…" in warning
    assert warning.endswith("run `kubectl topoplace explain`")
