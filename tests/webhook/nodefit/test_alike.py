"""explain judges one node per group of alike nodes: every node still gets exactly the verdict
a node-by-node judgement gives, whatever the pod reads of the nodes (its hostname, its name
through matchFields or nodeName, a rack label, free NUMA capacity)."""

from __future__ import annotations

import copy
from dataclasses import replace
from typing import Any

import pytest
import yaml

from tests.webhook.nodefit.conftest import EXAMPLE_NODES, POLICIES
from tests.webhook.placement_model.nrt import nrt
from webhook.engine.recipe import mutate
from webhook.nodefit.checks import plan_for
from webhook.nodefit.explanation import NUMA_FREE_CHECK, explain_pod
from webhook.nodefit.free_check import free_refusal
from webhook.nodefit.node_verdict import evaluate
from webhook.placement_model.filters.nodes import node_views
from webhook.placement_model.zones import zones_of_documents
from webhook.policy.loader import load_policy_dir

CLASSES = yaml.safe_load(EXAMPLE_NODES.read_text())["items"]


def _fleet() -> list[dict[str, Any]]:
    """Each example machine three times, with its own hostname and one of two racks."""
    out = []
    for i in range(3 * len(CLASSES)):
        node = copy.deepcopy(CLASSES[i % len(CLASSES)])
        name = f"{node['metadata']['name']}-{i}"
        node["metadata"]["name"] = name
        node["metadata"]["labels"]["kubernetes.io/hostname"] = name
        node["metadata"]["labels"]["example.com/rack"] = f"rack-{i % 2}"
        out.append({**node, "kind": "Node"})
    return out


def _pod(gpus: int, **spec: Any) -> dict[str, Any]:
    limits = {"nvidia.com/gpu": str(gpus)}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "p", "labels": {"topoplace.io/policy": "single-numa-partial"}},
        "spec": {"containers": [{"name": "w", "image": "x", "resources": {"limits": limits}}]}
        | spec,
    }


def _term(**term: Any) -> dict[str, Any]:
    terms = {"nodeSelectorTerms": [term]}
    return {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": terms}}


PODS = {
    "plain": _pod(2),
    "hostname selector": _pod(2, nodeSelector={"kubernetes.io/hostname": "dgx-h100-a-12"}),
    "rack affinity": _pod(1, affinity=_term(matchExpressions=[
        {"key": "example.com/rack", "operator": "In", "values": ["rack-1"]}])),
    "matchFields": _pod(1, affinity=_term(matchFields=[
        {"key": "metadata.name", "operator": "In", "values": ["dgx-a100-a-4"]}])),
    "bound": _pod(1, nodeName="hgx-h100-a-2"),
    "many GPUs": _pod(8),
}  # fmt: skip


@pytest.mark.parametrize("case", sorted(PODS))
def test_every_node_gets_its_own_verdict(case: str) -> None:
    docs = _fleet()
    views = node_views(docs)
    # Free GPUs differ node to node: some alike machines have room now and some have not.
    zones = zones_of_documents(
        nrt(d["metadata"]["name"], [4, 4] if i % 3 else [0, 1]) for i, d in enumerate(docs)
    )
    policies = load_policy_dir(POLICIES)
    pod = PODS[case]
    got = {v.node: v for v in explain_pod(copy.deepcopy(pod), "ml", policies, views,
                                          zones=zones.get).nodes}  # fmt: skip
    mutation = mutate(copy.deepcopy(pod), "ml", policies)
    plan = plan_for(mutation.pod, mutation.applied)
    for view in views:
        alone = evaluate(plan, view)
        reason = free_refusal(plan, zones.get(view.name)) if alone.fits else None
        if reason is not None:
            alone = replace(alone, fits=False, reason=reason, check=NUMA_FREE_CHECK,
                            reasons=(reason,))  # fmt: skip
        assert got[view.name] == alone, view.name
    assert len(got) == len(views)
