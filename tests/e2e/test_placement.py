"""Where the real kube-scheduler puts mutated pods: only on nodes whose labels satisfy the
policy; on the node holding the dataset when nodes are otherwise equal; nowhere, with the
scheduler saying why, when no node satisfies the policy."""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from common import cache_layout
from common.vocabulary import Label, dataset_label
from e2e import procs
from e2e.cluster import Cluster
from e2e.kube import Kubectl
from tests.e2e.helpers import REPO, events, explain, node_labels, training_pod, wait_bound
from tests.e2e.kubelet_truth import wait_admitted_or_refused
from webhook.policy.loader import load_policy_dir

POLICIES = load_policy_dir(REPO / "policies")
LINKS = ("PIX", "PXB", "PHB", "NODE", "SYS")


def satisfies(labels: dict[str, str], policy_name: str, gpus: int) -> bool:
    """Does a node with `labels` meet the policy's placement rules, read from the policy?"""
    placement = POLICIES.get(policy_name).spec.placement  # type: ignore[union-attr]
    if int(labels.get(Label.GPUS, "0")) < gpus:
        return False
    if placement.gpu_nic_link is not None:
        link = labels.get(Label.GPU_NIC_LINK)
        if link is None or LINKS.index(link) > LINKS.index(placement.gpu_nic_link):
            return False
    if placement.gpu_nic_pairs and int(labels.get(Label.GPU_NIC_PAIRS, "0")) < gpus:
        return False
    if placement.single_numa_node and int(labels.get(Label.MAX_GPUS_PER_NUMA_NODE, "0")) < gpus:
        return False
    policies = placement.topology_manager_policies
    return not policies or labels.get(Label.TOPOLOGY_MANAGER_POLICY) in policies


def fitting_nodes(cluster: Cluster, kubectl: Kubectl, policy: str, gpus: int) -> set[str]:
    return {n for n in cluster.nodes if satisfies(node_labels(kubectl, n), policy, gpus)}


def test_full_node_ddp_pods_land_only_where_the_policy_allows(
    cluster: Cluster, kubectl: Kubectl, namespace: str, create: Callable[..., Any]
) -> None:
    allowed = fitting_nodes(cluster, kubectl, "ddp-hgx-full-node", 8)
    assert allowed == {"dgx-h100-a", "dgx-h100-b"}  # the fixtures' labels, as discover says
    for i in range(len(allowed)):
        create(training_pod(f"ddp-{i}", "ddp-hgx-full-node", 8), namespace)
    bound = {wait_bound(kubectl, namespace, f"ddp-{i}") for i in range(len(allowed))}
    assert bound == allowed  # 8 GPUs each: one pod per allowed node, none elsewhere


def assert_pending_on_node_affinity(kubectl: Kubectl, namespace: str, pod: str) -> None:
    """kube-scheduler keeps the pod Pending and says node affinity is why."""
    failed = procs.wait_for(
        lambda: events(kubectl, namespace, pod, "FailedScheduling"),
        f"a FailedScheduling event for pod {pod}",
    )
    assert "node affinity" in failed[-1]["message"], failed[-1]["message"]
    assert kubectl.json("get", "pod", pod, "-n", namespace)["spec"].get("nodeName") is None


def test_a_single_numa_partial_pod_lands_where_one_numa_node_holds_it(
    cluster: Cluster, kubectl: Kubectl, namespace: str, create: Callable[..., Any]
) -> None:
    allowed = fitting_nodes(cluster, kubectl, "single-numa-partial", 1)
    assert allowed == {"dgx-a100-nps4"}
    create(training_pod("partial", "single-numa-partial", 1), namespace)
    assert wait_bound(kubectl, namespace, "partial") in allowed
    assert wait_admitted_or_refused(kubectl, namespace, "partial") == ("Running", "")


def test_a_pod_no_numa_node_can_hold_waits_instead_of_being_refused_by_the_kubelet(
    cluster: Cluster, kubectl: Kubectl, namespace: str, create: Callable[..., Any]
) -> None:
    """2 × 96Gi fit no NPS4 NUMA node (125 GiB): the real kubelet there refused such a pod
    with TopologyAffinityError. The webhook's affinity now keeps it off that node."""
    labels = node_labels(kubectl, "dgx-a100-nps4")
    assert int(labels[Label.MAX_GPUS_PER_NUMA_NODE]) >= 2  # the GPUs alone would fit
    assert int(labels[Label.MAX_MEMORY_GIB_PER_NUMA_NODE]) < 192
    create(training_pod("partial-2", "single-numa-partial", 2), namespace)
    assert_pending_on_node_affinity(kubectl, namespace, "partial-2")


def test_a_pod_no_node_satisfies_stays_pending_and_the_scheduler_says_node_affinity(
    cluster: Cluster, kubectl: Kubectl, namespace: str, create: Callable[..., Any]
) -> None:
    assert fitting_nodes(cluster, kubectl, "single-numa-partial", 4) == set()
    create(training_pod("nowhere", "single-numa-partial", 4), namespace)
    assert_pending_on_node_affinity(kubectl, namespace, "nowhere")


@pytest.fixture
def imagenet_on(cluster: Cluster, kubectl: Kubectl) -> Iterator[Callable[[str], Path]]:
    key = dataset_label("imagenet")
    # Earlier pods of the policy had it prefetched for real on their nodes: start from a
    # fleet where no node holds it, as if an operator had evicted it everywhere.
    for record in cluster.nodes.values():
        root = Path(record["datasets"])
        cache_layout.marker_path(root, "imagenet", "2024-06").unlink(missing_ok=True)
    for node in cluster.nodes:
        procs.wait_for(
            lambda node=node: key not in node_labels(kubectl, node), f"label {key} gone from {node}"
        )
    written: list[tuple[str, Path]] = []

    def put(node: str) -> Path:
        root = Path(cluster.nodes[node]["datasets"])
        version = cache_layout.version_dir(root, "imagenet", "2024-06")
        version.mkdir(parents=True, exist_ok=True)
        (version / "train-00000.tar").write_bytes(b"\0" * 1024)
        marker = cache_layout.marker_path(root, "imagenet", "2024-06")
        marker.write_text(
            json.dumps(
                {
                    "source": "s3://ml-datasets/imagenet/2024-06/",
                    "files": 1,
                    "bytes": 1024,
                    "completed_at": "2026-12-01T00:00:00Z",
                }
            )
        )
        written.append((node, marker))
        return marker

    yield put
    for node, marker in written:
        marker.unlink()
        procs.wait_for(
            lambda node=node: key not in node_labels(kubectl, node), f"label {key} gone from {node}"
        )


def test_a_cached_dataset_is_labelled_within_2s_and_attracts_the_next_pod(
    cluster: Cluster,
    kubectl: Kubectl,
    namespace: str,
    create: Callable[..., Any],
    imagenet_on: Callable[[str], Path],
) -> None:
    node, key = "dgx-h100-b", dataset_label("imagenet")
    assert key not in node_labels(kubectl, node)
    started = time.monotonic()
    imagenet_on(node)
    procs.wait_for(
        lambda: node_labels(kubectl, node).get(key) == "2024-06",
        f"label {key}=2024-06 on {node}",
        timeout=2.0,
        interval=0.05,
    )
    print(f"marker → label through the API server: {time.monotonic() - started:.2f}s")
    # dgx-h100-a and -b are otherwise equal; the policy prefers the node holding imagenet.
    create(training_pod("ddp-cached", "ddp-hgx-full-node", 8), namespace)
    assert wait_bound(kubectl, namespace, "ddp-cached") == node


def test_a_pod_using_a_cached_version_holds_a_lease_until_it_is_gone(
    cluster: Cluster,
    kubectl: Kubectl,
    namespace: str,
    create: Callable[..., Any],
    imagenet_on: Callable[[str], Path],
) -> None:
    # The agent's pod watch (through the real API server) leases what bound pods mount, so
    # eviction can never take a version a running job reads.
    node = "dgx-h100-b"
    imagenet_on(node)
    procs.wait_for(
        lambda: node_labels(kubectl, node).get(dataset_label("imagenet")),
        f"imagenet labelled on {node}",
    )
    stored = json.loads(create(training_pod("reader", "ddp-hgx-full-node", 8), namespace).stdout)
    assert wait_bound(kubectl, namespace, "reader") == node
    leases = cache_layout.lease_dir(Path(cluster.nodes[node]["datasets"]), "imagenet", "2024-06")
    uid = stored["metadata"]["uid"]
    procs.wait_for(lambda: (leases / uid).exists(), f"the agent's lease for pod reader in {leases}")
    kubectl("delete", "pod", "reader", "-n", namespace, "--grace-period=0", "--force")
    procs.wait_for(lambda: not (leases / uid).exists(), "the lease of deleted pod reader dropped")


# kube-scheduler's words in a FailedScheduling event for each filter, and explain's check
# groups that stand for it (issue 44: explain reports each node's first failure in the
# scheduler's filter order).
_SCHEDULER_WORDS = {
    "cordoned": r"(\d+) node\(s\) were unschedulable",
    "taints": r"(\d+) node\(s\) had untolerated taint",
    "affinity": r"(\d+) node\(s\) didn't match Pod's node affinity/selector",
}


def _filter_of(check: str) -> str | None:
    if check in ("cordoned", "taints"):
        return check
    if check.startswith("allocatable ") or check in ("kubelet topology manager", "numa-free"):
        return None  # not a filter that runs before NodeAffinity's verdict here
    return "affinity"  # the agent's labels, the policy's terms, the pod's own affinity


def test_explain_names_each_node_as_the_schedulers_event_does(
    cluster: Cluster, kubectl: Kubectl, namespace: str, create: Callable[..., Any], tmp_path: Path
) -> None:
    """A tainted node that would also fail the policy's affinity: kube-scheduler's event counts
    it under the taint (TaintToleration runs before NodeAffinity), and so does explain."""
    tainted = "dgx-h100-a"
    taint = "topoplace-e2e/maintenance=firmware:NoSchedule"
    kubectl.run("taint", "node", tainted, taint)
    try:
        pod = training_pod("ordered", "single-numa-partial", 8)
        create(pod, namespace)
        failed = procs.wait_for(
            lambda: events(kubectl, namespace, "ordered", "FailedScheduling"),
            "a FailedScheduling event for pod ordered",
        )
        message = failed[-1]["message"]
        verdicts = explain(cluster, pod, namespace, tmp_path)["nodes"]
        firsts = {v["node"]: _filter_of(v["check"] or "") for v in verdicts if not v["fits"]}
        assert firsts[tainted] == "taints", verdicts
        for name, pattern in _SCHEDULER_WORDS.items():
            found = re.search(pattern, message)
            counted = sum(1 for f in firsts.values() if f == name)
            assert (int(found.group(1)) if found else 0) == counted, (name, message, firsts)
    finally:
        kubectl.run("taint", "node", tainted, taint + "-")
