"""Across nodes: a job's pods kept within one network block, on the real cluster.

The module adds 8 small machines (workstations, 2 GPUs each), two per sub-block of 2 blocks x
2 sub-blocks (8 GPUs a block), and removes them after. Their agents learn the position from
a GCP-style metadata server on 127.0.0.1 (the agent DaemonSet is given `--network-metadata
gcp` for the module, and given its own arguments back after); two of them carry GKE's labels
instead, set as a cloud controller would, and the metadata server knows nothing about those
two. The default nodes get a 404 there and no position.
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
from prometheus_client.parser import text_string_to_metric_families

from common.vocabulary import ForeignLabel, Label
from e2e import procs
from e2e.addons import kueue
from e2e.cluster import Cluster
from e2e.kube import Kubectl
from tests.agent.discovery import machines
from tests.agent.position.metadata_server import MetadataServer, metadata_server
from tests.e2e.helpers import (
    REPO,
    cluster_cli,
    node_labels,
    patch_policies,
    pods,
    webhook_metrics,
)
from webhook.vocabulary import POLICY_LABEL

BLOCKS = {
    f"across-b{b}s{s}n{n}": (f"b{b}", f"s{s}") for b in (1, 2) for s in (1, 2) for n in (1, 2)
}
BLOCK_GPUS = 8  # 4 workstations of 2
BY_LABEL = ("across-b1s2n1", "across-b2s1n2")  # GKE's labels, not metadata
POLICY = "across-together"
POLICY_FILE = f"{POLICY}.yaml"
POLICY_DOC = {
    "apiVersion": "topoplace.io/v1alpha1",
    "kind": "PlacementPolicy",
    "metadata": {"name": POLICY},
    "spec": {
        "namespaces": ["ml-*"],
        "placement": {"keepTogether": {"level": "network-tier-2", "mode": "required"}},
        "resources": {"cpuPerGpu": 2, "memoryPerGpu": "1Gi"},
    },
}
PREFERRED = "across-preferred"
PREFERRED_FILE = f"{PREFERRED}.yaml"
AGENT = ("daemonset", "topoplace-agent", "-n", "topoplace-system")
CLUSTER_QUEUE = "across-tas"


def _agent_args(kubectl: Kubectl) -> tuple[list[str], dict[str, Any]]:
    ds = kubectl.json("get", *AGENT)
    (agent,) = [c for c in ds["spec"]["template"]["spec"]["containers"] if c["name"] == "agent"]
    return list(agent["args"]), ds["spec"].get("updateStrategy") or {}


def _set_agent(kubectl: Kubectl, args: list[str], strategy: dict[str, Any]) -> None:
    patch = {
        "spec": {
            "updateStrategy": strategy,
            "template": {"spec": {"containers": [{"name": "agent", "args": args}]}},
        }
    }
    kubectl("patch", *AGENT, "--type=strategic", "-p", json.dumps(patch))
    kubectl.run("rollout", "status", *AGENT, "--timeout=180s", timeout=200)


def _serve_positions(server: MetadataServer) -> None:
    for node, (block, sub) in BLOCKS.items():
        if node not in BY_LABEL:
            topology = {"block": block, "subblock": sub, "host": node}
            server.answer(f"/{node}/attrs", json.dumps({"physical_host_topology": topology}))


@pytest.fixture(scope="module")
def fleet(
    cluster: Cluster, kubectl: Kubectl, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[None]:
    tmp = tmp_path_factory.mktemp("across")
    sysfs = machines.build("workstation", tmp / "sys")
    config = tmp / "kubelet.yaml"
    config.write_text("cpuManagerPolicy: static\nreservedSystemCPUs: '0'\n")
    original, strategy = _agent_args(kubectl)
    with metadata_server() as server:
        _serve_positions(server)
        endpoint = f"{server.url}/$(NODE_NAME)/attrs"
        position = ["--network-metadata=gcp", f"--network-metadata-endpoint={endpoint}"]
        fast = [a for a in original if not a.startswith("--resync-interval")]
        all_at_once = {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": "100%"}}
        added: list[str] = []
        try:
            _set_agent(kubectl, [*fast, "--resync-interval=3", *position], all_at_once)
            for node in BLOCKS:
                done = cluster_cli(
                    "add-node", node, "--sysfs", str(sysfs), "--kubelet-config", str(config)
                )
                assert done.returncode == 0, done.stdout + done.stderr
                added.append(node)
            for node in BY_LABEL:
                block, sub = BLOCKS[node]
                kubectl(
                    "label", "node", node,
                    f"{ForeignLabel.GKE_BLOCK}={block}", f"{ForeignLabel.GKE_SUBBLOCK}={sub}",
                )  # fmt: skip
            procs.wait_for(
                lambda: all(
                    node_labels(kubectl, n).get(Label.NETWORK_TIER_2) == BLOCKS[n][0]
                    for n in BLOCKS
                ),
                "every added node labelled with its block",
                timeout=90,
            )
            patch_policies(kubectl, {POLICY_FILE: yaml.safe_dump(POLICY_DOC)})
            yield
        finally:
            patch_policies(kubectl, {POLICY_FILE: None}, wait=False)
            for node in added:
                cluster_cli("remove-node", node)
            _set_agent(kubectl, original, strategy)


def _job(
    name: str,
    pods_: int,
    *,
    policy: str | None = POLICY,
    queue: bool = False,
    on_the_fleet: bool = False,
) -> dict:
    labels = {POLICY_LABEL: policy} if policy else {}
    if queue:
        labels[kueue.QUEUE_NAME_LABEL] = "team"
    container = {
        "name": "trainer",
        "image": "nvcr.io/nvidia/pytorch:25.01-py3",
        "command": ["torchrun", "--nproc-per-node=1", "train.py"],
        "resources": {"limits": {"nvidia.com/gpu": 1}},
    }
    spec: dict[str, Any] = {"restartPolicy": "Never", "containers": [container]}
    if on_the_fleet:  # only nodes with a known block: the default nodes have GPUs too
        exists = {"key": Label.NETWORK_TIER_2, "operator": "Exists"}
        spec["affinity"] = {
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": [{"matchExpressions": [exists]}]
                }
            }
        }
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "labels": labels},
        "spec": {
            "parallelism": pods_,
            "completions": pods_,
            "template": {"metadata": {"labels": {"app": name}}, "spec": spec},
        },
    }


def _spans(cluster: Cluster, namespace: str) -> dict[str, dict[str, Any]]:
    """`topoplace-webhook spans` on the cluster: each workload of `namespace` by name."""
    done = subprocess.run(
        [sys.executable, "-m", "webhook", "spans", "--kubeconfig", str(cluster.kubeconfig),
         "-n", namespace, "-o", "json"],
        cwd=REPO, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    return {w["name"]: w for w in json.loads(done.stdout)["workloads"]}


def _span_metric(kubectl: Kubectl, namespace: str, job: str) -> dict[str, float]:
    """The webhook's topoplace_webhook_workload_* samples for one Job, the most any replica
    says (each exports the same once its caches are in), by metric name and level."""
    found: dict[str, float] = {}
    for text in webhook_metrics(kubectl):
        for family in text_string_to_metric_families(text):
            for s in family.samples:
                ours = s.labels.get("namespace") == namespace and s.labels.get("workload") == job
                if ours and s.name.startswith("topoplace_webhook_workload_"):
                    key = s.name.removeprefix("topoplace_webhook_workload_")
                    key += f"/{s.labels['level']}" if "level" in s.labels else ""
                    found[key] = max(found.get(key, 0.0), s.value)
    return found


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
    create(_job("together", 4), namespace)
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
    audit = _spans(cluster, namespace)["together"]
    assert (audit["pods"], audit["domains"]["network-tier-2"]) == (4, 1), audit
    assert audit["maxHops"] is not None and audit["maxHops"] <= 3, audit
    got = procs.wait_for(
        lambda: (m := _span_metric(kubectl, namespace, "together")).get("pods") == 4 and m,
        "the webhook's span metrics for the job",
        timeout=30,
    )
    assert got["domains/network-tier-2"] == 1 and got["max_hops"] == audit["maxHops"], got


def test_without_the_policy_nothing_keeps_the_job_together(
    fleet: None, kubectl: Kubectl, namespace: str, create: Any
) -> None:
    # Not "it spreads" (a scheduler may well pack it): nothing ties the pods to one block.
    stored = json.loads(create(_job("loose", 4, policy=None), namespace).stdout)
    template = stored["spec"]["template"]
    assert "podAffinity" not in (template["spec"].get("affinity") or {})
    assert not any(k.startswith("kueue.x-k8s.io/podset") for k in
                   (template["metadata"].get("annotations") or {}))  # fmt: skip
    together = json.loads(create(_job("kept", 4), namespace).stdout)
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
        job = _job("too-big", BLOCK_GPUS + 1, queue=True)  # one GPU more than a block has
        stored = json.loads(create(job, namespace).stdout)
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
        path.write_text(json.dumps(job))
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
        create(_job("spill", size, policy=PREFERRED, on_the_fleet=True), namespace)
        bound = _bound(kubectl, namespace, "spill", size)
        assert len({BLOCKS[p["spec"]["nodeName"]][0] for p in bound}) == 2
        audit = _spans(cluster, namespace)["spill"]
        assert (audit["pods"], audit["domains"]["network-tier-2"]) == (size, 2), audit
        # No source here knows a cluster id (tier 3): across blocks the distance is unknown.
        assert audit["maxHops"] is None and audit["unknownHopPairs"] > 0, audit
        got = procs.wait_for(
            lambda: (m := _span_metric(kubectl, namespace, "spill")).get("pods") == size and m,
            "the webhook's span metrics for the job",
            timeout=30,
        )
        assert got["domains/network-tier-2"] == 2 and "max_hops" not in got, got
    finally:
        patch_policies(kubectl, {PREFERRED_FILE: None}, wait=False)
