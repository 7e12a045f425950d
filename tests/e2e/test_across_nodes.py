"""Across nodes: a job's pods kept within one network block, on the real cluster, on the
fleet of tests/e2e/across_fleet.py (8 workstations in 2 blocks x 2 sub-blocks)."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from common.vocabulary import ForeignLabel, Label
from e2e import procs
from e2e.addons import kueue
from e2e.cluster import Cluster
from e2e.kube import Kubectl
from tests.e2e.across_fleet import (
    BLOCK_GPUS,
    BLOCKS,
    BY_LABEL,
    POLICY_DOC,
    POLICY_FILE,
    across_fleet,
    job,
    span_metric,
    spans,
)
from tests.e2e.helpers import REPO, cluster_cli, node_labels, patch_policies, pods

PREFERRED = "across-preferred"
PREFERRED_FILE = f"{PREFERRED}.yaml"
CLUSTER_QUEUE = "across-tas"


@pytest.fixture(scope="module")
def fleet(kubectl: Kubectl, tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    with across_fleet(kubectl, tmp_path_factory.mktemp("across")):
        yield


def _bound(kubectl: Kubectl, namespace: str, app: str, count: int) -> list[dict[str, Any]]:
    def all_bound() -> list[dict[str, Any]] | None:
        found = pods(kubectl, namespace, f"app={app}")
        bound = [p for p in found if p["spec"].get("nodeName")]
        return bound if len(bound) >= count else None

    return procs.wait_for(all_bound, f"{count} pods of {app} bound", timeout=120)


def test_positions_come_from_metadata_and_from_labels_without_overwriting_them(
    fleet: None, kubectl: Kubectl
) -> None:
    for node, (block, sub) in BLOCKS.items():
        labels = node_labels(kubectl, node)
        assert labels[Label.NETWORK_TIER_1] == f"{block}.{sub}"
        assert Label.NETWORK_TIER_3 not in labels  # no source knows a cluster id here
    for node in BY_LABEL:
        labels = node_labels(kubectl, node)
        assert labels[ForeignLabel.GKE_SUBBLOCK] == BLOCKS[node][1]  # untouched
    assert Label.NETWORK_TIER_2 not in node_labels(kubectl, "dgx-h100-a")  # a 404: none


def test_a_required_policy_keeps_a_4_pod_job_in_one_block_each_pod_aligned(
    fleet: None, cluster: Cluster, kubectl: Kubectl, namespace: str, create: Any
) -> None:
    create(job("together", 4), namespace)
    bound = _bound(kubectl, namespace, "together", 4)
    nodes = {p["spec"]["nodeName"] for p in bound}
    assert {BLOCKS[n][0] for n in nodes if n in BLOCKS} and nodes <= set(BLOCKS)
    assert len({BLOCKS[n][0] for n in nodes}) == 1  # one block: what the policy guarantees
    for node in nodes:
        done = cluster_cli("audit", node, "--output", "json")
        assert done.returncode == 0, done.stderr
        ours = [c for c in json.loads(done.stdout)["containers"] if c["namespace"] == namespace]
        assert ours and all(c["verdict"] == "aligned" for c in ours), ours
    # The audit per workload says the same: one block, at most 3 hops (through its switch).
    audit = spans(cluster, namespace)["together"]
    assert (audit["pods"], audit["domains"]["network-tier-2"]) == (4, 1), audit
    assert audit["maxHops"] is not None and audit["maxHops"] <= 3, audit
    got = procs.wait_for(
        lambda: (m := span_metric(kubectl, namespace, "together")).get("pods") == 4 and m,
        "the webhook's span metrics for the job",
        timeout=30,
    )
    assert got["domains/network-tier-2"] == 1 and got["max_hops"] == audit["maxHops"], got


def test_without_the_policy_nothing_keeps_the_job_together(
    fleet: None, kubectl: Kubectl, namespace: str, create: Any
) -> None:
    # Not "it spreads" (a scheduler may well pack it): nothing ties the pods to one block.
    stored = json.loads(create(job("loose", 4, policy=None), namespace).stdout)
    template = stored["spec"]["template"]
    assert "podAffinity" not in (template["spec"].get("affinity") or {})
    assert not any(k.startswith("kueue.x-k8s.io/podset") for k in
                   (template["metadata"].get("annotations") or {}))  # fmt: skip
    together = json.loads(create(job("kept", 4), namespace).stdout)
    (term,) = together["spec"]["template"]["spec"]["affinity"]["podAffinity"][
        "requiredDuringSchedulingIgnoredDuringExecution"
    ]
    assert term["topologyKey"] == Label.NETWORK_TIER_2


def _kueue_setup(cluster: Cluster, kubectl: Kubectl, namespace: str) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "webhook", "kueue-topology",
         "--kubeconfig", str(cluster.kubeconfig), "--name", "across"],
        cwd=REPO, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    topology, flavor = yaml.safe_load_all(done.stdout)
    assert [lv["nodeLabel"] for lv in topology["spec"]["levels"]] == [
        Label.NETWORK_TIER_2, Label.NETWORK_TIER_1, "kubernetes.io/hostname"
    ]  # fmt: skip
    queue = kueue.cluster_queue(CLUSTER_QUEUE, cpu="200", memory="400Gi", gpus=64)
    queue["spec"]["resourceGroups"][0]["flavors"][0]["name"] = flavor["metadata"]["name"]
    kubectl.apply([topology, flavor, queue])
    kubectl.apply(kueue.local_queue("team", namespace, CLUSTER_QUEUE))


def test_a_job_bigger_than_any_block_stays_pending_with_kueues_reason(
    fleet: None, cluster: Cluster, kubectl: Kubectl, namespace: str, create: Any, tmp_path: Path
) -> None:
    if not cluster.info.get("kueue"):
        pytest.skip(f"no Kueue on this cluster (started with {kueue.OPT_OUT}=0)")
    _kueue_setup(cluster, kubectl, namespace)
    try:
        too_big = job("too-big", BLOCK_GPUS + 1, queue=True)  # one GPU more than a block has
        stored = json.loads(create(too_big, namespace).stdout)
        annotations = stored["spec"]["template"]["metadata"]["annotations"]
        assert annotations["kueue.x-k8s.io/podset-required-topology"] == Label.NETWORK_TIER_2

        def refused() -> dict[str, Any] | None:
            for w in kubectl.json("get", "workloads.kueue.x-k8s.io", "-n", namespace)["items"]:
                for c in (w.get("status") or {}).get("conditions") or []:
                    if c["type"] == "QuotaReserved" and c["status"] == "False" and c["message"]:
                        return c
            return None

        condition = procs.wait_for(refused, "Kueue's reason for not admitting", timeout=60)
        assert "topology" in condition["message"].lower(), condition
        assert kubectl.json("get", "job", "too-big", "-n", namespace)["spec"]["suspend"] is True
        assert not pods(kubectl, namespace, "app=too-big")
        # explain's per-domain view says why: no block holds 5 pods of 1 GPU.
        path = tmp_path / "job.yaml"
        path.write_text(json.dumps(too_big))
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
        assert view["pods"] == BLOCK_GPUS + 1 and view["fitting"] == 0
        assert {d["domain"] for d in view["domains"]} == {"b1", "b2"}
        assert all(d["fits"] <= BLOCK_GPUS and d["reason"] for d in view["domains"])
    finally:
        for kind, name in (("clusterqueue", CLUSTER_QUEUE), ("resourceflavor", "across-flavor"),
                           ("topology", "across")):  # fmt: skip
            kubectl.run("delete", f"{kind}.kueue.x-k8s.io", name, "--wait=false", check=False)


def test_a_preferred_policy_spans_two_blocks_when_it_must_and_the_audit_says_so(
    fleet: None, cluster: Cluster, kubectl: Kubectl, namespace: str, create: Any
) -> None:
    preferred = {**POLICY_DOC, "metadata": {"name": PREFERRED}}
    preferred["spec"] = {
        **POLICY_DOC["spec"],
        "placement": {"keepTogether": {"level": "network-tier-2", "mode": "preferred"}},
    }
    patch_policies(kubectl, {PREFERRED_FILE: yaml.safe_dump(preferred)})
    try:
        size = BLOCK_GPUS + 1  # no block holds it: preferred lets it spill over
        create(job("spill", size, policy=PREFERRED, on_the_fleet=True), namespace)
        bound = _bound(kubectl, namespace, "spill", size)
        assert len({BLOCKS[p["spec"]["nodeName"]][0] for p in bound}) == 2
        audit = spans(cluster, namespace)["spill"]
        assert (audit["pods"], audit["domains"]["network-tier-2"]) == (size, 2), audit
        # No source here knows a cluster id (tier 3): across blocks the distance is unknown.
        assert audit["maxHops"] is None and audit["unknownHopPairs"] > 0, audit
        got = procs.wait_for(
            lambda: (m := span_metric(kubectl, namespace, "spill")).get("pods") == size and m,
            "the webhook's span metrics for the job",
            timeout=30,
        )
        assert got["domains/network-tier-2"] == 2 and "max_hops" not in got, got
    finally:
        patch_policies(kubectl, {PREFERRED_FILE: None}, wait=False)
