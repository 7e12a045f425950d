"""Builders for the cases ported from kube-scheduler's own unit tests (test_upstream_*.py).

Each case is restated as the objects the API server stores: a Node document read by
NodeView.from_object, a pod spec read by plan_for, so the port runs the same parsing a user's
`explain` and the webhook's admission check run. The `case` helper keeps each case's source
next to it: the upstream test file, the test function and the case's own name.
"""

from __future__ import annotations

import itertools
from typing import Any

import pytest

from webhook.nodefit.checks import PodPlan, plan_for
from webhook.nodefit.node_index import NodeIndex
from webhook.nodefit.node_verdict import evaluate, with_usage
from webhook.placement_model.filters.nodes import NodeView, used_by_node
from webhook.placement_model.requests import pod_requests

# Where the cases come from (read at these revisions).
API = "k8s.io/api@10b39a39 core/v1"
APIMACHINERY = "k8s.io/apimachinery@eed236ce"
HELPERS = "k8s.io/component-helpers@1961876b"
SCHEDULER = "kubernetes/kubernetes pkg/scheduler/framework/plugins"


def case(source: str, name: str, *values: Any) -> Any:
    """One ported case: its id names the upstream test and case it restates."""
    return pytest.param(*values, id=f"{source} :: {name}")


def node(
    name: str = "node",
    labels: dict[str, str] | None = None,
    *,
    taints: list[dict[str, str]] | None = None,
    allocatable: dict[str, Any] | None = None,
) -> NodeView:
    """A Node as the API server returns it (no status.allocatable: resources go unchecked)."""
    doc: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": dict(labels or {})},
        "spec": {"taints": taints} if taints else {},
    }
    if allocatable is not None:
        doc["status"] = {"allocatable": {k: str(v) for k, v in allocatable.items()}}
    return NodeView.from_object(doc)


def pod(spec: dict[str, Any]) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}, "spec": spec}


_NAMES = itertools.count()


def container(requests: dict[str, Any] | None = None, **extra: Any) -> dict[str, Any]:
    found: dict[str, Any] = {"name": f"c{next(_NAMES)}", "image": "x", **extra}
    if requests is not None:
        found["resources"] = {"requests": {k: str(v) for k, v in requests.items()}}
    return found


def plan(spec: dict[str, Any]) -> PodPlan:
    return plan_for(pod(spec), None)


def fits(spec: dict[str, Any], view: NodeView) -> bool:
    """The pod's verdict on the node, from explain's checks; the admission-time index (which
    reads no usage) must agree when the node has none."""
    judged = plan(spec)
    verdict = evaluate(judged, view).fits
    if not view.used and not view.pods:
        assert NodeIndex([view]).fits_somewhere(judged) is verdict
    return verdict


def with_pods(view: NodeView, *specs: dict[str, Any]) -> NodeView:
    """The node with pods already bound to it (their requests summed as the scheduler does)."""
    usage = used_by_node((view.name, pod_requests(s)) for s in specs)
    return with_usage([view], usage)[0]
