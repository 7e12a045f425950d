"""keepTogether through Kubernetes v1.37's own gang and topology-aware scheduling, on the real
cluster started with the Workload API and its gates on (`make e2e-podgroups`:
TOPOPLACE_E2E_WORKLOAD_SCHEDULING=1), on the across fleet (tests/e2e/across_fleet.py: 8
workstations of 2 GPUs, 2 blocks of 8 GPUs). The default cluster has the gates off: there
every scenario here is skipped.

A Job under the required policy, with no queue, is stored with `spec.scheduling` (a gang on
the block key); the Job controller writes its Workload and PodGroup; kube-scheduler places
the group in one block or not at all. The last scenario runs the same two Jobs with today's
first-pod affinity instead, and reports what it does.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from common.vocabulary import Label
from e2e import procs
from e2e.cluster import Cluster
from e2e.kube import Kubectl
from tests.e2e.across_fleet import (
    BLOCK_GPUS,
    BLOCKS,
    POLICY_DOC,
    POLICY_FILE,
    across_fleet,
    affinity_job,
    job,
)
from tests.e2e.helpers import REPO, cluster_cli, pods

GANG = {"gang": {}}
CONSTRAINT = {"topology": [{"key": Label.NETWORK_TIER_2}]}


@pytest.fixture(scope="module")
def fleet(
    cluster: Cluster, kubectl: Kubectl, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[None]:
    if not cluster.info.get("workload_scheduling"):
        pytest.skip("the cluster runs without the Workload API (make e2e-podgroups turns it on)")
    with across_fleet(kubectl, tmp_path_factory.mktemp("podgroups")):
        yield


def _group_of(kubectl: Kubectl, namespace: str, name: str) -> dict[str, Any]:
    """The PodGroup the Job controller made for Job `name` (its controller owner)."""

    def made() -> dict[str, Any] | None:
        for group in kubectl.json("get", "podgroups.scheduling.k8s.io", "-n", namespace)["items"]:
            owners = group["metadata"].get("ownerReferences") or []
            if any(o["kind"] == "Job" and o["name"] == name for o in owners):
                return group
        return None

    return procs.wait_for(made, f"the PodGroup of Job {name}", timeout=60)


def _condition(kubectl: Kubectl, namespace: str, group: str) -> dict[str, Any]:
    """The scheduler's verdict on the group (PodGroupInitiallyScheduled)."""

    def said() -> dict[str, Any] | None:
        status = kubectl.json("get", "podgroup", group, "-n", namespace).get("status") or {}
        found = [
            c for c in status.get("conditions") or [] if c["type"] == "PodGroupInitiallyScheduled"
        ]
        return found[0] if found else None

    return procs.wait_for(said, f"the scheduler's verdict on PodGroup {group}", timeout=120)


def _settled(kubectl: Kubectl, namespace: str, apps: dict[str, int]) -> dict[str, list[dict]]:
    """Every pod of each app created and either bound or marked unschedulable by the scheduler."""

    def done() -> dict[str, list[dict]] | None:
        out = {}
        for app, count in apps.items():
            found = pods(kubectl, namespace, f"app={app}")
            if len(found) < count or not all(_bound(p) or _unschedulable(p) for p in found):
                return None
            out[app] = found
        return out

    return procs.wait_for(
        done, f"the pods of {', '.join(apps)} bound or unschedulable", timeout=180
    )


def _bound(pod: dict[str, Any]) -> bool:
    return bool(pod["spec"].get("nodeName"))


def _unschedulable(pod: dict[str, Any]) -> bool:
    conditions = (pod.get("status") or {}).get("conditions") or []
    return any(
        c["type"] == "PodScheduled" and c.get("reason") == "Unschedulable" for c in conditions
    )


def _blocks(found: list[dict[str, Any]]) -> set[str]:
    return {BLOCKS[p["spec"]["nodeName"]][0] for p in found if _bound(p)}


def test_a_4_pod_job_runs_in_one_block_as_one_gang_each_pod_aligned(
    fleet: None, kubectl: Kubectl, namespace: str, create: Any
) -> None:
    stored = json.loads(create(job("gang", 4, on_the_fleet=True), namespace).stdout)
    assert stored["spec"]["scheduling"] == {
        "schedulingPolicy": GANG,
        "schedulingConstraints": CONSTRAINT,
    }  # the webhook saw the API and the gates, and asked for a gang in one block
    assert "podAffinity" not in (stored["spec"]["template"]["spec"].get("affinity") or {})
    group = _group_of(kubectl, namespace, "gang")
    assert group["spec"]["schedulingPolicy"] == {"gang": {"minCount": 4}}
    assert group["spec"]["schedulingConstraints"] == CONSTRAINT
    assert _condition(kubectl, namespace, group["metadata"]["name"])["status"] == "True"
    found = _settled(kubectl, namespace, {"gang": 4})["gang"]
    assert all(_bound(p) for p in found) and len(_blocks(found)) == 1
    named = {p["spec"]["schedulingGroup"]["podGroupName"] for p in found}
    assert named == {group["metadata"]["name"]}
    for node in {p["spec"]["nodeName"] for p in found}:
        done = cluster_cli("audit", node, "--output", "json")
        assert done.returncode == 0, done.stderr
        ours = [c for c in json.loads(done.stdout)["containers"] if c["namespace"] == namespace]
        assert ours and all(c["verdict"] == "aligned" for c in ours), ours


def test_a_job_no_block_holds_stays_pending_whole_and_explain_says_why(
    fleet: None, cluster: Cluster, kubectl: Kubectl, namespace: str, create: Any, tmp_path: Path
) -> None:
    size = BLOCK_GPUS + 1  # one GPU more than a block has
    stored = json.loads(create(job("too-big", size, on_the_fleet=True), namespace).stdout)
    group = _group_of(kubectl, namespace, "too-big")
    verdict = _condition(kubectl, namespace, group["metadata"]["name"])
    assert (verdict["status"], verdict["reason"]) == ("False", "Unschedulable"), verdict
    found = _settled(kubectl, namespace, {"too-big": size})["too-big"]
    assert not [p["metadata"]["name"] for p in found if _bound(p)]  # none bound: all or nothing
    path = tmp_path / "job.yaml"
    path.write_text(json.dumps(stored))
    policies = tmp_path / "policies"
    policies.mkdir()
    (policies / POLICY_FILE).write_text(yaml.safe_dump(POLICY_DOC))
    done = subprocess.run(
        [sys.executable, "-m", "webhook", "explain", "--policies", str(policies),
         "--namespace", namespace, "--kubeconfig", str(cluster.kubeconfig),
         "--output", "json", str(path)],
        cwd=REPO, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    view = json.loads(done.stdout)["domains"]
    assert view["source"] == "Job/too-big spec.scheduling" and view["key"] == Label.NETWORK_TIER_2
    assert (view["pods"], view["fitting"]) == (size, 0)
    assert {d["domain"] for d in view["domains"]} == {"b1", "b2"}
    assert all(d["fits"] <= BLOCK_GPUS and d["reason"] for d in view["domains"])


def test_two_jobs_each_get_a_block_none_split(
    fleet: None, kubectl: Kubectl, namespace: str, create: Any
) -> None:
    size = BLOCK_GPUS - 2  # each fits a block; both do not fit one
    for name in ("left", "right"):
        create(job(name, size, on_the_fleet=True), namespace)
    settled = _settled(kubectl, namespace, {"left": size, "right": size})
    for found in settled.values():
        assert all(_bound(p) for p in found) and len(_blocks(found)) == 1
    assert _blocks(settled["left"]) != _blocks(settled["right"])


def test_the_same_two_jobs_with_first_pod_affinity_for_comparison(
    fleet: None, kubectl: Kubectl, namespace: str, create: Any
) -> None:
    """Today's mechanism, written by hand (the webhook writes PodGroups here): each Job's pods
    require one another's block; nothing schedules either as a whole. Reported, and held to
    what the affinity does guarantee: a Job's bound pods share one block."""
    size = BLOCK_GPUS - 2
    for name in ("left", "right"):
        stored = json.loads(create(affinity_job(name, size), namespace).stdout)
        assert "scheduling" not in stored["spec"]
    settled = _settled(kubectl, namespace, {"left": size, "right": size})
    report = {
        app: {"bound": sum(map(_bound, found)), "blocks": sorted(_blocks(found))}
        for app, found in settled.items()
    }
    print(f"first-pod affinity, two {size}-pod Jobs on 2 blocks of {BLOCK_GPUS}: {report}")
    for found in settled.values():
        assert len(_blocks(found)) <= 1  # the affinity keeps what it binds in one block


def test_a_job_no_block_holds_with_first_pod_affinity_starts_in_part(
    fleet: None, kubectl: Kubectl, namespace: str, create: Any
) -> None:
    """The comparison for the Pending-whole scenario: with the affinity nothing holds the
    job back as a whole, so a block's worth binds and the rest waits (what a gang avoids)."""
    size = BLOCK_GPUS + 1
    create(affinity_job("too-big", size), namespace)
    found = _settled(kubectl, namespace, {"too-big": size})["too-big"]
    bound = sum(map(_bound, found))
    print(f"first-pod affinity, one {size}-pod Job on 2 blocks of {BLOCK_GPUS}: {bound} bound")
    assert len(_blocks(found)) == 1 and 0 < bound <= BLOCK_GPUS
