"""`explain` on the fleet of real machine classes, against what the label contract implies.

Every verdict is checked against an oracle written from docs/labels.md's label table and the
example policies, independently of the code under test: a node fits a placement when its
labels say so, it tolerates the node's taints, and its allocatable covers the requests.
"""

from __future__ import annotations

import copy
import io
import json
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.webhook.nodefit.conftest import POLICIES
from webhook.cli.main import main

LINKS = ["PIX", "PXB", "PHB", "NODE", "SYS"]


def explain(*args: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        code = main(["explain", *args])
    return code, out.getvalue(), err.getvalue()


def pod_file(tmp_path: Path, policy: str, gpus: int, namespace: str = "ml-team") -> Path:
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": "p",
            "namespace": namespace,
            "labels": {"topoplace.io/policy": policy},
        },
        "spec": {
            "containers": [
                {
                    "name": "trainer",
                    "image": "pytorch:2.8",
                    "command": ["torchrun", "train.py"],
                    "resources": {"limits": {"nvidia.com/gpu": gpus}},
                }
            ]
        },
    }
    path = tmp_path / f"{policy}-{gpus}.yaml"
    path.write_text(yaml.safe_dump(pod))
    return path


def oracle(node: dict[str, Any], policy: dict[str, Any], gpus: int) -> bool:
    """Does `node` fit, by docs/labels.md's label contract and the policy (not by our code)."""
    labels = node["metadata"]["labels"]
    alloc = node["status"]["allocatable"]
    place = policy["spec"].get("placement", {})
    res = policy["spec"].get("resources", {})
    if "gpuNicLink" in place:
        link = labels.get("topoplace.io/gpu-nic-link")
        if link is None or LINKS.index(link) > LINKS.index(place["gpuNicLink"]):
            return False
    if place.get("gpuNicPairs") and int(labels.get("topoplace.io/gpu-nic-pairs", -1)) < gpus:
        return False
    numa = int(labels.get("topoplace.io/max-gpus-per-numa-node", -1))
    if place.get("singleNumaNode") and numa < gpus:
        return False
    need_cpu = res.get("cpuPerGpu", 0) * gpus
    need_mem_gi = int(str(res.get("memoryPerGpu", "0Gi")).removesuffix("Gi")) * gpus
    # singleNumaNode: one NUMA node must hold a Guaranteed pod's CPUs and memory too, or the
    # kubelet (single-numa-node) refuses it. The one container is the whole pod here.
    if place.get("singleNumaNode") and res.get("guaranteed", True):
        cpus = int(labels.get("topoplace.io/max-cpus-per-numa-node", -1))
        gib = int(labels.get("topoplace.io/max-memory-gib-per-numa-node", -1))
        if cpus < need_cpu or gib < need_mem_gi:
            return False
    allowed = place.get("topologyManagerPolicies")
    if allowed and labels.get("topoplace.io/topology-manager-policy") not in allowed:
        return False
    if node["spec"].get("taints"):
        return False
    rdma = res.get("rdma")
    return (
        int(alloc.get("nvidia.com/gpu", 0)) >= gpus
        and int(alloc["cpu"]) >= need_cpu
        and int(alloc["memory"].removesuffix("Gi")) >= need_mem_gi
        and (rdma is None or int(alloc.get(rdma["resource"], 0)) >= rdma["perGpu"] * gpus)
    )


def load_policy(name: str) -> dict[str, Any]:
    for path in POLICIES.glob("*.yaml"):
        for doc in yaml.safe_load_all(path.read_text()):
            if doc and doc["metadata"]["name"] == name:
                return doc
    raise LookupError(name)


@pytest.mark.parametrize("policy", ["ddp-hgx-full-node", "single-numa-partial", "inference"])
@pytest.mark.parametrize("gpus", [1, 2, 4, 8])
def test_verdicts_follow_the_label_contract(
    policy: str, gpus: int, nodes: list[dict[str, Any]], nodes_yaml: Path, tmp_path: Path
) -> None:
    code, out, _ = explain(
        "--policies", str(POLICIES), "--nodes", str(nodes_yaml), "--output", "json",
        str(pod_file(tmp_path, policy, gpus)),
    )  # fmt: skip
    verdicts = {n["node"]: n for n in json.loads(out)["nodes"]}
    doc = load_policy(policy)
    expected = {n["metadata"]["name"]: oracle(n, doc, gpus) for n in nodes}
    assert {k: v["fits"] for k, v in verdicts.items()} == expected
    assert code == (0 if any(expected.values()) else 1)
    for verdict in verdicts.values():
        assert (verdict["reason"] is None) == verdict["fits"]


def reasons_of(out: str) -> dict[str, str | None]:
    return {n["node"]: n["reason"] for n in json.loads(out)["nodes"]}


def test_first_reasons_name_the_topology(nodes_yaml: Path, tmp_path: Path) -> None:
    pod = pod_file(tmp_path, "ddp-hgx-full-node", 8, namespace="ml-research")
    code, out, _ = explain(
        "--policies", str(POLICIES), "--nodes", str(nodes_yaml), "--output", "json", str(pod)
    )
    assert code == 0
    reasons = reasons_of(out)
    assert reasons["dgx-h100-a"] is None and reasons["dgx-h100-b"] is None
    assert reasons["dgx-a100-a"] == "gpu-nic-link is PXB; policy needs PIX"
    assert reasons["pcie-l40s-a"] == "gpu-nic-link is NODE; policy needs PIX"
    assert reasons["workstation-a"] == "gpu-nic-link is PHB; policy needs PIX"
    assert reasons["cpu-vm-a"] == "no GPU (gpu-nic-link absent); policy needs PIX"
    assert reasons["fresh-gpu-a"] == "no topoplace labels (is topoplace-agent running on it?)"
    assert reasons["hgx-h100-a"] == (
        "topology-manager-policy single-numa-node; policy needs restricted or best-effort"
    )
    assert reasons["hgx-a800-a"] == "allocatable cpu 126 < 192"
    assert reasons["dgx-h100-tainted"] == "taint maintenance=firmware:NoSchedule not tolerated"
    scores = {n["node"]: n["score"] for n in json.loads(out)["nodes"]}
    assert scores["dgx-h100-a"] == 80 and scores["dgx-h100-b"] == 0  # imagenet 2024-06 cached


def test_a_pod_no_node_can_hold_exits_1_with_the_numa_reason(
    nodes_yaml: Path, tmp_path: Path
) -> None:
    pod = pod_file(tmp_path, "single-numa-partial", 8)
    code, out, _ = explain("--policies", str(POLICIES), "--nodes", str(nodes_yaml), str(pod))
    assert code == 1
    assert "4 GPUs per NUMA node; pod needs 8" in out
    assert "0 of 12 nodes fit" in out


def test_single_numa_node_needs_one_numa_node_for_memory_too(
    nodes_yaml: Path, tmp_path: Path
) -> None:
    # DGX A100 in NPS4: 2 GPUs on a NUMA node, but 125 GiB of memory each.
    for policy, gpus, reason in [
        ("single-numa-partial", 2, "125 GiB memory per NUMA node; pod needs 192"),
        ("inference", 2, "125 GiB memory per NUMA node; pod needs 128"),
    ]:
        _, out, _ = explain(
            "--policies", str(POLICIES), "--nodes", str(nodes_yaml), "--output", "json",
            str(pod_file(tmp_path, policy, gpus)),
        )  # fmt: skip
        assert reasons_of(out)["dgx-a100-a"] == reason


def test_the_pods_own_affinity_and_selector_are_checked_too(
    nodes_yaml: Path, tmp_path: Path
) -> None:
    path = pod_file(tmp_path, "inference", 2)
    pod = yaml.safe_load(path.read_text())
    pod["spec"]["nodeSelector"] = {"kubernetes.io/hostname": "dgx-h100-b"}
    many_gpus = {"key": "topoplace.io/gpus", "operator": "Gt", "values": ["4"]}
    by_name = {"key": "metadata.name", "operator": "In", "values": ["pcie-l40s-b"]}
    terms = [{"matchExpressions": [many_gpus]}, {"matchFields": [by_name]}]
    required = {"nodeSelectorTerms": terms}
    pod["spec"]["affinity"] = {
        "nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": required}
    }
    path.write_text(yaml.safe_dump(pod))
    code, out, _ = explain(
        "--policies", str(POLICIES), "--nodes", str(nodes_yaml), "--output", "json", str(path)
    )
    verdicts = {n["node"]: n for n in json.loads(out)["nodes"]}
    assert [k for k, v in verdicts.items() if v["fits"]] == ["dgx-h100-b"]
    assert verdicts["pcie-l40s-b"]["reason"] == "kubernetes.io/hostname is pcie-l40s-b; " \
        "nodeSelector needs dgx-h100-b"  # fmt: skip
    assert verdicts["dgx-h100-a"]["check"] == "nodeSelector"
    assert code == 0


def test_a_denied_pod_fits_nowhere(nodes_yaml: Path, tmp_path: Path) -> None:
    pod = pod_file(tmp_path, "ddp-hgx-full-node", 8, namespace="default")
    code, out, err = explain("--policies", str(POLICIES), "--nodes", str(nodes_yaml), str(pod))
    assert code == 1
    assert err.count("may not use placement policy") == 1  # once, not once per node
    assert "the webhook denies this pod (above)" in out


@pytest.mark.parametrize(
    ("nodes_text", "message"),
    [
        ("kind: Pod\nmetadata: {name: x}\n", "holds Pod objects; expected Node objects"),
        ("kind: List\nitems: [{kind: Node, metadata: {}}]\n", "without metadata.name"),
        ("kind: Node\nmetadata: {name: a}\n---\nkind: Node\nmetadata: {name: a}\n", "twice"),
        ("a: [", "invalid YAML"),
    ],
)
def test_bad_nodes_exit_2_naming_the_problem(nodes_text: str, message: str, tmp_path: Path) -> None:
    bad = tmp_path / "nodes.yaml"
    bad.write_text(nodes_text)
    pod = pod_file(tmp_path, "inference", 1)
    code, _, err = explain("--policies", str(POLICIES), "--nodes", str(bad), str(pod))
    assert code == 2 and message in err


def test_several_templates_need_a_choice(nodes_yaml: Path, tmp_path: Path) -> None:
    job = {
        "apiVersion": "kubeflow.org/v1",
        "kind": "PyTorchJob",
        "metadata": {"name": "pt"},
        "spec": {
            "pytorchReplicaSpecs": {
                role: {"template": {"spec": {"containers": [{"name": "c", "image": "i"}]}}}
                for role in ("Master", "Worker")
            }
        },
    }
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(job))
    base = ["--policies", str(POLICIES), "--nodes", str(nodes_yaml), str(path)]
    code, _, err = explain(*base)
    assert code == 2 and "--template" in err and "Worker" in err
    where = "spec.pytorchReplicaSpecs.Worker.template"
    code, out, _ = explain(*base, "--template", where)
    assert code == 0 and "PyTorchJob/pt spec.pytorchReplicaSpecs.Worker.template" in out


def test_nodes_without_policies_dir_is_a_usage_error(nodes_yaml: Path, tmp_path: Path) -> None:
    code, _, err = explain("--nodes", str(nodes_yaml), str(pod_file(tmp_path, "inference", 1)))
    assert code == 2 and "--policies" in err


def test_hand_written_nodes_without_allocatable_are_judged_on_labels(
    nodes: list[dict[str, Any]], tmp_path: Path
) -> None:
    bare = [{k: v for k, v in n.items() if k != "status"} for n in nodes]
    path = tmp_path / "nodes.yaml"
    path.write_text(yaml.safe_dump_all(bare))  # several documents, not a List
    pod = pod_file(tmp_path, "ddp-hgx-full-node", 8)
    code, out, err = explain(
        "--policies", str(POLICIES), "--nodes", str(path), "--output", "json", str(pod)
    )
    fits = sorted(n["node"] for n in json.loads(out)["nodes"] if n["fits"])
    assert fits == ["dgx-h100-a", "dgx-h100-b", "hgx-a800-a"]  # cpu no longer counted
    assert code == 0 and "12 node(s) without status.allocatable" in err


@pytest.mark.parametrize(
    ("taint", "words"),
    [
        ("node.kubernetes.io/unreachable", "its kubelet stopped posting status"),
        ("node.kubernetes.io/not-ready", "its kubelet reports it not ready"),
    ],
)
def test_a_node_whose_kubelet_went_silent_is_named_not_ready(
    taint: str, words: str, nodes: list[dict[str, Any]], tmp_path: Path
) -> None:
    """node-lifecycle taints a NotReady node; explain says NotReady, not just the taint."""
    lost = copy.deepcopy(next(n for n in nodes if n["metadata"]["name"] == "dgx-h100-a"))
    lost["spec"]["taints"] = [{"key": taint, "effect": "NoSchedule"}]
    nodes_file = tmp_path / "nodes.yaml"
    nodes_file.write_text(yaml.safe_dump({"apiVersion": "v1", "kind": "List", "items": [lost]}))
    code, out, _ = explain(
        "--policies", str(POLICIES), "--nodes", str(nodes_file), "--output", "json",
        str(pod_file(tmp_path, "ddp-hgx-full-node", 8)),
    )  # fmt: skip
    assert code == 1
    assert reasons_of(out)["dgx-h100-a"] == (
        f"node NotReady ({words}): taint {taint}:NoSchedule not tolerated"
    )
