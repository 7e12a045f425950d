"""The no-fit warning over the example fleet (docs/examples/nodes.yaml): it names the nearest
misses, and a long one is cut within the limit, the pointer to explain kept."""

from __future__ import annotations

from pathlib import Path

import yaml

from tests.webhook.nodefit.conftest import EXAMPLE_NODES
from tests.webhook.nodefit.test_index import POLICY_SET, gpu_pod
from webhook.engine.recipe import mutate
from webhook.nodefit.checks import plan_for
from webhook.nodefit.node_index import NodeIndex
from webhook.placement_model.filters.nodes import NodeView
from webhook.policy.loader import load_policy_dir
from webhook.warnings.hardware import no_fit_warning
from webhook.warnings.lines import EXPLAIN, LIMIT, shorten


def test_the_warning_names_the_nearest_misses_within_256_characters() -> None:
    nodes = yaml.safe_load(EXAMPLE_NODES.read_text())["items"]
    index = NodeIndex(NodeView.from_object(n) for n in nodes)
    result = mutate(gpu_pod("single-numa-partial", 8), "ml-team", POLICY_SET)
    plan = plan_for(result.pod, POLICY_SET.get("single-numa-partial"))
    parts = no_fit_warning(plan, index.assess(plan), len(index))
    assert parts is not None and len(warning := shorten(parts)) <= LIMIT
    assert warning.startswith(
        "topoplace: no node fits placement policy single-numa-partial for 8 GPUs: "
    )
    assert "fail gpu-nic-link (NODE, PHB, absent)" in warning
    # kube-scheduler's order: the tainted node is named for its taint, not its GPUs.
    assert "5 fail max-gpus-per-numa-node (2, 4), 1 fail taints" in warning
    assert "1 lack topoplace labels" in warning
    assert warning.endswith(EXPLAIN)


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
    parts = no_fit_warning(plan, NodeIndex(views).assess(plan), len(views))
    assert parts is not None and len(parts.text()) > LIMIT  # whole, it would not fit
    warning = shorten(parts)
    assert len(warning) <= LIMIT and warning.endswith(f", …{EXPLAIN}")
    assert warning.startswith("topoplace: no node fits placement policy long for 1 GPU: 1 node ")
