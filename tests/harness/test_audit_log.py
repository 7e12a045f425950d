"""The e2e API server's audit log reader (e2e/controlplane/audit.py) on audit.k8s.io/v1 Events
shaped as kube-apiserver v1.37 writes them at Metadata level (fields copied from a real log)."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from e2e.controlplane.audit import AUDIT_POLICY, count_writes, lines_of, read_writes

AGENT = "system:serviceaccount:topoplace-system:topoplace-agent"
KUBELET = "system:node:dgx-h100-a"
T0 = 1796356297.0  # 2026-12-04T03:51:37Z


def _iso(t: float) -> str:
    return datetime.fromtimestamp(t, UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def event(
    *,
    verb: str = "patch",
    resource: str = "noderesourcetopologies",
    subresource: str | None = None,
    user: str = AGENT,
    at: float = T0,
    stage: str = "ResponseComplete",
    code: int = 200,
) -> dict[str, Any]:
    group = "topology.node.k8s.io" if resource == "noderesourcetopologies" else ""
    ref: dict[str, Any] = {"resource": resource, "name": "dgx-h100-a", "apiVersion": "v1alpha2"}
    if group:
        ref["apiGroup"] = group
    if subresource:
        ref["subresource"] = subresource
    return {
        "kind": "Event",
        "apiVersion": "audit.k8s.io/v1",
        "level": "Metadata",
        "auditID": "3bac8dc4-792b-4cd7-8c50-7a9385cdde04",
        "stage": stage,
        "requestURI": f"/apis/{group}/v1alpha2/{resource}/dgx-h100-a",
        "verb": verb,
        "user": {"username": user, "groups": ["system:serviceaccounts", "system:authenticated"]},
        "sourceIPs": ["127.0.0.1"],
        "userAgent": "Python/3.11 aiohttp/3.13",
        "objectRef": ref,
        "responseStatus": {"metadata": {}, "code": code},
        "requestReceivedTimestamp": _iso(at),
        "stageTimestamp": _iso(at + 0.004),
        "annotations": {"authorization.k8s.io/decision": "allow"},
    }


def lines(*events: dict[str, Any]) -> list[str]:
    return [json.dumps(e, separators=(",", ":")) for e in events]


def test_counts_the_agents_completed_writes_by_verb_and_resource() -> None:
    log = lines(
        event(verb="create"),
        event(at=T0 + 1),
        event(at=T0 + 2),
        event(resource="nodes", at=T0 + 3),
        event(resource="nodes", subresource="status", user=KUBELET, at=T0 + 3),  # not the agent
        event(at=T0 + 4, stage="ResponseStarted"),  # a watch's first stage, not a completion
        event(verb="get", at=T0 + 5),  # a read
    )
    count = count_writes(log, user=AGENT, start=T0)
    assert dict(count.by_kind) == {
        ("create", "noderesourcetopologies"): 1,
        ("patch", "noderesourcetopologies"): 2,
        ("patch", "nodes"): 1,
    }
    assert (count.total, count.failed, count.malformed) == (4, 0, 0)
    kubelet = count_writes(log, user=KUBELET, start=T0)
    assert dict(kubelet.by_kind) == {("patch", "nodes/status"): 1}


def test_the_window_is_half_open_on_the_received_time() -> None:
    log = lines(*(event(at=T0 + i) for i in range(10)))
    assert count_writes(log, user=AGENT, start=T0 + 2, end=T0 + 5).total == 3
    assert count_writes(log, user=AGENT, start=T0 + 10).total == 0


def test_refused_writes_are_counted_apart() -> None:
    log = lines(event(code=409), event(code=429, at=T0 + 1), event(at=T0 + 2))
    count = count_writes(log, user=AGENT, start=T0)
    assert (count.total, count.failed) == (1, 2)


def test_malformed_lines_are_skipped_and_counted() -> None:
    cut = lines(event())[0][:57]  # a line cut short by rotation or a crash
    no_user = event(at=T0 + 1)
    del no_user["user"]
    bad_time = event(at=T0 + 2)
    bad_time["requestReceivedTimestamp"] = "yesterday"
    log = [
        cut,
        "not json",
        "[]",
        "null",
        json.dumps(no_user),
        json.dumps(bad_time),
        "",
        *lines(event(at=T0 + 3)),
    ]
    count = count_writes(log, user=AGENT, start=T0)
    assert (count.total, count.malformed) == (1, 6)


@given(st.lists(st.text(max_size=200), max_size=20))
def test_any_text_is_read_without_raising(text: list[str]) -> None:
    writes, malformed = read_writes(text)
    assert len(writes) + malformed <= len(text)


def test_rotated_backups_are_read_oldest_first(tmp_path: Path) -> None:
    (tmp_path / "audit-2026-12-04T03-10-00.000.log").write_text(lines(event())[0] + "\n")
    (tmp_path / "audit.log").write_text(lines(event(at=T0 + 1))[0] + "\n")
    (tmp_path / "kube-apiserver.log").write_text("E1204 not an audit line\n")
    writes, malformed = read_writes(lines_of(tmp_path / "audit.log"))
    assert [w.time for w in writes] == [T0, T0 + 1]
    assert malformed == 0


def test_the_policy_logs_only_writes_to_nodes_and_node_resource_topologies() -> None:
    first, last = AUDIT_POLICY["rules"]
    assert first["level"] == "Metadata"
    assert sorted(first["verbs"]) == ["create", "delete", "patch", "update"]
    assert {(r["group"], tuple(r["resources"])) for r in first["resources"]} == {
        ("", ("nodes", "nodes/status")),
        ("topology.node.k8s.io", ("noderesourcetopologies",)),
    }
    assert last == {"level": "None"}
