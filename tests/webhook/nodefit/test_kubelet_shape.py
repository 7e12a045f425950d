"""Bad input around the kubelet-shape terms: nodes whose agent predates the labels the terms
read, and kubelet settings the model does not know."""

from __future__ import annotations

from pathlib import Path

from common.vocabulary import Label
from tests.webhook.placement_model.test_kubelet_model import ISSUE_POLICY, node, pod_with
from webhook.engine.recipe import mutate
from webhook.nodefit.checks import plan_for
from webhook.nodefit.node_index import NodeIndex
from webhook.nodefit.node_verdict import evaluate
from webhook.placement_model.filters.nodes import NodeView
from webhook.policy.loader import load_policy_dir
from webhook.warnings.hardware import no_fit_warning
from webhook.warnings.lines import shorten


def _without(view: NodeView, *keys: str, name: str) -> NodeView:
    labels = {k: v for k, v in view.labels.items() if k not in keys}
    return NodeView(name, labels, view.allocatable, numa=view.numa, pairing=view.pairing)


def test_a_node_without_the_managers_labels_waits_and_the_warning_names_label_and_node(
    tmp_path: Path,
) -> None:
    (tmp_path / "p").mkdir()
    (tmp_path / "p" / "aligned.yaml").write_text(ISSUE_POLICY)
    policies = load_policy_dir(tmp_path / "p")
    h100 = node("h100", "dgx-h100", "restricted", "1968Gi", tmp_path)
    old = [_without(h100, Label.MAX_CPUS_PER_NUMA_NODE, name=f"old-agent-{i}") for i in range(3)]
    mutated = mutate(pod_with({"nvidia.com/gpu": 4}, "aligned"), "ml", policies).pod
    plan = plan_for(mutated, policies.get("aligned"))
    assert evaluate(plan, h100).fits
    verdict = evaluate(plan, old[0])
    assert not verdict.fits and verdict.check == "kubelet shape"
    assert "max-cpus-per-numa-node absent" in (verdict.reason or "")
    index = NodeIndex(old)
    assessment = index.assess(plan)
    parts = no_fit_warning(plan, assessment, len(old))
    assert parts is not None
    warning = shorten(parts)
    missing = "3 nodes fail kubelet shape (no max-cpus-per-numa-node on old-agent-0, old-agent-1, …"
    assert missing in warning
    assert warning.endswith("run `kubectl topoplace explain`") and len(warning) <= 256


def test_a_topology_manager_policy_the_model_does_not_know_is_not_aligning_and_said(
    tmp_path: Path,
) -> None:
    h100 = node("h100", "dgx-h100", "restricted", "1968Gi", tmp_path)
    labels = {**h100.labels, Label.TOPOLOGY_MANAGER_POLICY: "numa-magic"}
    odd = NodeView("odd", labels, h100.allocatable, numa=h100.numa, pairing=h100.pairing)
    # 8 GPUs with 96 CPUs: refused under restricted, not judged under an unknown policy.
    plan = plan_for(pod_with({"nvidia.com/gpu": 8, "cpu": "96", "memory": "96Gi"}), None)
    assert not evaluate(plan, h100).fits
    verdict = evaluate(plan, odd)
    assert verdict.fits
    assert verdict.notes == (
        "topology-manager-policy numa-magic is not one Topoplace models: judged as not aligning",
    )
