"""Kubelet admission refusals counted from the node's pods (issue 35): each refused pod once,
labelled by namespace and reason only."""

from __future__ import annotations

from typing import Any

import pytest
from prometheus_client import CollectorRegistry, generate_latest

from agent.sync.pod_events.refusals import KubeletRefusals, refusal_reason


def _pod(uid: str, phase: str, reason: str | None, namespace: str = "ml") -> dict[str, Any]:
    status: dict[str, Any] = {"phase": phase}
    if reason is not None:
        status["reason"] = reason
    return {"metadata": {"uid": uid, "namespace": namespace, "name": "p"}, "status": status}


@pytest.mark.parametrize(
    ("phase", "reason", "expected"),
    [
        ("Failed", "TopologyAffinityError", "TopologyAffinityError"),
        ("Failed", "OutOfnvidia.com/gpu", "OutOfnvidia.com/gpu"),
        ("Failed", "OutOfcpu", "OutOfcpu"),
        ("Failed", "OutOf", None),
        ("Failed", "Evicted", None),  # not an admission refusal
        ("Failed", None, None),
        ("Pending", "TopologyAffinityError", None),
    ],
)
def test_only_the_kubelets_admission_refusals_count(
    phase: str, reason: str | None, expected: str | None
) -> None:
    assert refusal_reason(_pod("u", phase, reason)) == expected


def test_a_refused_pod_is_counted_once_however_often_it_is_seen() -> None:
    registry = CollectorRegistry()
    refusals = KubeletRefusals(registry)
    for _ in range(3):  # the ADDED, a MODIFIED, and the next relist
        refusals.observe(_pod("u1", "Failed", "TopologyAffinityError"))
    refusals.observe(_pod("u2", "Failed", "TopologyAffinityError", namespace="team-b"))
    refusals.observe(_pod("u3", "Running", None))
    page = generate_latest(registry).decode()
    assert (
        'topoplace_agent_kubelet_refusals_total{namespace="ml",reason="TopologyAffinityError"} 1.0'
        in page
    )
    assert 'namespace="team-b",reason="TopologyAffinityError"} 1.0' in page
    assert "u1" not in page  # never a pod UID in a label
