"""The across-nodes fleet on the real cluster, for the scenarios (test_across_nodes.py) and
`make bench-e2e`: 8 small machines (workstations, 2 GPUs each), two per sub-block of 2
blocks x 2 sub-blocks (8 GPUs a block), added with `add-node` and removed after.

Their agents learn the position from a GCP-style metadata server on 127.0.0.1 (the agent
DaemonSet is given `--network-metadata gcp` and a 3 s resync while the fleet is up, and its
own arguments back after); two of them carry GKE's labels instead, set as a cloud controller
would, and the metadata server knows nothing about those two. The default nodes get a 404
there and no position.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import yaml
from prometheus_client.parser import text_string_to_metric_families

from common.vocabulary import ForeignLabel, Label
from e2e import procs
from e2e.addons import kueue
from e2e.cluster import Cluster
from e2e.kube import Kubectl
from tests.agent.discovery import machines
from tests.agent.position.metadata_server import MetadataServer, metadata_server
from tests.e2e.helpers import REPO, cluster_cli, node_labels, patch_policies, webhook_metrics
from webhook.vocabulary import POLICY_LABEL

__all__ = [
    "BLOCKS",
    "BLOCK_GPUS",
    "BY_LABEL",
    "POLICY",
    "POLICY_DOC",
    "POLICY_FILE",
    "across_fleet",
    "affinity_job",
    "job",
    "span_metric",
    "spans",
]

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
_AGENT = ("daemonset", "topoplace-agent", "-n", "topoplace-system")


def _agent_args(kubectl: Kubectl) -> tuple[list[str], dict[str, Any]]:
    ds = kubectl.json("get", *_AGENT)
    (agent,) = [c for c in ds["spec"]["template"]["spec"]["containers"] if c["name"] == "agent"]
    return list(agent["args"]), ds["spec"].get("updateStrategy") or {}


def _set_agent(kubectl: Kubectl, args: list[str], strategy: dict[str, Any]) -> None:
    patch = {
        "spec": {
            "updateStrategy": strategy,
            "template": {"spec": {"containers": [{"name": "agent", "args": args}]}},
        }
    }
    kubectl("patch", *_AGENT, "--type=strategic", "-p", json.dumps(patch))
    kubectl.run("rollout", "status", *_AGENT, "--timeout=180s", timeout=200)


def _serve_positions(server: MetadataServer) -> None:
    for node, (block, sub) in BLOCKS.items():
        if node not in BY_LABEL:
            topology = {"block": block, "subblock": sub, "host": node}
            server.answer(f"/{node}/attrs", json.dumps({"physical_host_topology": topology}))


@contextmanager
def across_fleet(kubectl: Kubectl, tmp: Path) -> Iterator[None]:
    """The fleet up, every node labelled with its block, and the required policy served."""
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


def job(
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


def affinity_job(name: str, pods_: int) -> dict:
    """The Job the required policy gives its pods without PodGroups, written by hand (no
    policy label): the policy's requests, and pod affinity to its own pods over the block
    key (the first pod chooses the block). For comparison on a cluster where the webhook
    writes a PodGroup instead."""
    spec = job(name, pods_, policy=None, on_the_fleet=True)
    template = spec["spec"]["template"]["spec"]
    (trainer,) = template["containers"]
    each = {"cpu": "2", "memory": "1Gi", "nvidia.com/gpu": 1}
    trainer["resources"] = {"requests": dict(each), "limits": dict(each)}
    term = {
        "labelSelector": {"matchLabels": {"batch.kubernetes.io/job-name": name}},
        "topologyKey": Label.NETWORK_TIER_2,
    }
    template["affinity"]["podAffinity"] = {"requiredDuringSchedulingIgnoredDuringExecution": [term]}
    return spec


def spans(cluster: Cluster, namespace: str) -> dict[str, dict[str, Any]]:
    """`topoplace-webhook spans` on the cluster: each workload of `namespace` by name."""
    done = subprocess.run(
        [sys.executable, "-m", "webhook", "spans", "--kubeconfig", str(cluster.kubeconfig),
         "-n", namespace, "-o", "json"],
        cwd=REPO, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    return {w["name"]: w for w in json.loads(done.stdout)["workloads"]}


def span_metric(kubectl: Kubectl, namespace: str, job: str) -> dict[str, float]:
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
