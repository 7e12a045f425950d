"""A NodeResourceTopology out of date (the agent down while pods changed) is named in one
line: by explain, beside the node (webhook/nodefit/free_check.py), and in the admission warning
that no NUMA node has room (webhook/warnings/now.py, from the extender's ledger)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from tests.webhook.placement_model.nrt import nrt
from tests.webhook.server.test_remote_access_score import (
    LEARNING_POLICY,
    learning_pod,
    single_numa_dgx,
)
from webhook.nodefit.checks import plan_for
from webhook.nodefit.free_check import stale_note, stale_of
from webhook.placement_model.zones import zones_from_object
from webhook.warnings.now import NoRoom, free_warning, stale_room

NOW = datetime(2026, 12, 6, 12, 0, tzinfo=UTC)


def placed(
    name: str, node: str, gpus: int, *, started_s_ago: float | None, phase: str = "Running"
) -> dict[str, Any]:
    status: dict[str, Any] = {"phase": phase if started_s_ago is not None else "Pending"}
    if started_s_ago is not None:
        status["startTime"] = (
            (NOW - timedelta(seconds=started_s_ago)).isoformat().replace("+00:00", "Z")
        )
    return {
        "metadata": {"name": name, "namespace": "ml"},
        "spec": {"nodeName": node, "containers": [{"name": "c", "resources": {
            "requests": {"nvidia.com/gpu": str(gpus)}, "limits": {"nvidia.com/gpu": str(gpus)}}}]},
        "status": status,
    }  # fmt: skip


@pytest.mark.parametrize(
    ("free", "pods", "expected"),
    [
        # The object shows the 4 GPUs the pod holds: fresh.
        ([0, 4], [placed("a", "n", 4, started_s_ago=600)], None),
        # Admitted 5 s ago: the agent may not have written yet.
        ([4, 4], [placed("a", "n", 4, started_s_ago=5)], None),
        # Bound, not admitted; and ended: neither is held by the kubelet.
        ([4, 4], [placed("a", "n", 4, started_s_ago=None),
                  placed("b", "n", 2, started_s_ago=600, phase="Succeeded")], None),
        # Admitted 10 minutes ago, the object shows nothing in use: out of date.
        ([4, 4], [placed("a", "n", 4, started_s_ago=600)],
         "NodeResourceTopology out of date: it shows 0 nvidia.com/gpu in use, the pods its "
         "kubelet admitted over 15s ago hold 4 (agent down?)"),
        ([2, 4], [placed("a", "n", 2, started_s_ago=600), placed("b", "n", 1, started_s_ago=60)],
         "NodeResourceTopology out of date: it shows 2 nvidia.com/gpu in use, the pods its "
         "kubelet admitted over 15s ago hold 3 (agent down?)"),
    ],
)  # fmt: skip
def test_an_object_showing_fewer_devices_than_admitted_pods_hold_is_named(
    free: list[int], pods: list[dict[str, Any]], expected: str | None
) -> None:
    assert stale_note(zones_from_object(nrt("n", free)), pods, NOW) == expected


def test_explain_notes_the_stale_node_only(tmp_path: Path) -> None:
    from webhook.nodefit.explanation import explain_pod
    from webhook.placement_model.filters.nodes import NodeView
    from webhook.policy.loader import load_policy_dir

    (tmp_path / "learning.yaml").write_text(LEARNING_POLICY)
    policies = load_policy_dir(tmp_path)
    nodes = [NodeView.from_object(single_numa_dgx(n)) for n in ("dgx-h100-a", "dgx-h100-b")]
    zones = {n: zones_from_object(nrt(n, [4, 4])) for n in ("dgx-h100-a", "dgx-h100-b")}
    pods = [
        placed("old", "dgx-h100-a", 4, started_s_ago=600),
        placed("x", "elsewhere", 8, started_s_ago=600),
    ]
    explained = explain_pod(learning_pod(4), "default", policies, nodes, zones=zones.get,
                            stale=stale_of(zones, pods, NOW))  # fmt: skip
    notes = {v.node: v.notes for v in explained.nodes}
    assert [n for n in notes["dgx-h100-a"] if "out of date" in n] == [
        "NodeResourceTopology out of date: it shows 0 nvidia.com/gpu in use, the pods its "
        "kubelet admitted over 15s ago hold 4 (agent down?)"
    ]
    assert not any("out of date" in n for n in notes["dgx-h100-b"])


def test_the_no_room_warning_names_the_stale_object(tmp_path: Path) -> None:
    from webhook.policy.loader import load_policy_dir

    (tmp_path / "learning.yaml").write_text(LEARNING_POLICY)
    policy = load_policy_dir(tmp_path)["learning"]
    plan = plan_for(learning_pod(4), policy)
    late = ("NodeResourceTopology not updated 60s after the kubelet admitted 1 pod(s) (agent "
            "down?); their share is counted")  # fmt: skip
    found = stale_room(NoRoom(1, "dgx-h100-a", "no NUMA node has 4 GPUs free"),
                       {"dgx-h100-a": late}.get)  # fmt: skip
    parts = free_warning(plan, found)
    assert parts is not None and parts.after == (
        f": no NUMA node has 4 GPUs free; {late}); the pod waits for a NUMA node to free, or "
        "its kubelet refuses it"
    )
    assert stale_room(found, lambda _node: None) == found
