"""With Kueue: the queue admits and counts what the pods will really request.

Kueue (the real controller manager, `make cluster` runs it) builds a Workload from a Job's pod
template when the Job is created. The webhook mutates that template at CREATE, so the
Workload's podSets, the ClusterQueue's usage and the quota decisions all see the mutated
requests, and the pods come out of the template already mutated.

A cluster started with TOPOPLACE_E2E_KUEUE=0 runs no Kueue; there these scenarios are
skipped, saying so.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

from e2e import procs
from e2e.addons import kueue
from e2e.cluster import Cluster
from e2e.kube import Kubectl
from tests.e2e.helpers import REPO, explain, metric, pods, predict, wait_pods
from tests.kube import parse_quantity
from webhook.vocabulary import APPLIED_ANNOTATION, POLICY_LABEL

POLICY = "single-numa-partial"  # Guaranteed, cpuPerGpu 12, memoryPerGpu 96Gi
QUEUE = "team"
REQUESTS = "topoplace_webhook_admission_requests_total"
Create = Callable[..., Any]


def job(name: str, *, gpus: int = 2, parallelism: int = 2, queue: str = QUEUE) -> dict[str, Any]:
    """A Job as users write it for Kueue: both labels on the Job, only a GPU limit."""
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": name,
            "labels": {kueue.QUEUE_NAME_LABEL: queue, POLICY_LABEL: POLICY},
        },
        "spec": {
            "parallelism": parallelism,
            "completions": parallelism,
            "template": {
                "spec": {
                    "restartPolicy": "Never",
                    "containers": [
                        {
                            "name": "trainer",
                            "image": "nvcr.io/nvidia/pytorch:25.01-py3",
                            "command": ["torchrun", f"--nproc-per-node={gpus}", "train.py"],
                            "resources": {"limits": {"nvidia.com/gpu": gpus}},
                        }
                    ],
                }
            },
        },
    }


@pytest.fixture(autouse=True)
def _kueue_running(cluster: Cluster) -> None:
    if not cluster.info.get("kueue"):
        pytest.skip(f"no Kueue on this cluster (started with {kueue.OPT_OUT}=0)")


@pytest.fixture
def local_queue(kubectl: Kubectl, namespace: str) -> Iterator[Callable[[str], None]]:
    """`local_queue(cluster_queue)`: LocalQueue `team` in the scenario's namespace."""

    def make(cluster_queue: str = kueue.CLUSTER_QUEUE) -> None:
        kubectl.apply(kueue.local_queue(QUEUE, namespace, cluster_queue))

    yield make


@pytest.fixture
def tight_queue(kubectl: Kubectl) -> Iterator[str]:
    """A ClusterQueue that fits two 2-GPU Jobs as written (no CPU or memory asked), but one
    as mutated: 24 CPUs and 192Gi each (cpuPerGpu 12, memoryPerGpu 96Gi)."""
    name = "topoplace-e2e-tight"
    kubectl.apply(kueue.cluster_queue(name, cpu="30", memory="300Gi", gpus=4))
    yield name
    kubectl.run("delete", "clusterqueue", name, "--wait=false", check=False)


def workload(kubectl: Kubectl, namespace: str, job_name: str) -> dict[str, Any] | None:
    """The Workload Kueue made for the Job (owned by it), or None yet."""
    for item in kubectl.json("get", "workloads.kueue.x-k8s.io", "-n", namespace)["items"]:
        owners = item["metadata"].get("ownerReferences") or []
        if any(o["kind"] == "Job" and o["name"] == job_name for o in owners):
            return item
    return None


def condition(obj: dict[str, Any] | None, kind: str) -> dict[str, Any] | None:
    for c in ((obj or {}).get("status") or {}).get("conditions") or []:
        if c["type"] == kind:
            return c
    return None


def admitted_workload(kubectl: Kubectl, namespace: str, job_name: str) -> dict[str, Any]:
    return procs.wait_for(
        lambda: (
            (w := workload(kubectl, namespace, job_name))
            and (condition(w, "Admitted") or {}).get("status") == "True"
            and w
        ),
        f"Kueue admitting the Workload of Job {namespace}/{job_name}",
        timeout=60,
        interval=0.5,
    )


def requests_of(spec: dict[str, Any]) -> dict[str, Decimal]:
    """What a pod spec requests, as Kubernetes counts it: the sum of the containers, or the
    largest init container where that is larger."""
    total: dict[str, Decimal] = {}
    for c in spec["containers"]:
        for key, value in (c.get("resources") or {}).get("requests", {}).items():
            total[key] = total.get(key, Decimal(0)) + parse_quantity(value)
    for c in spec.get("initContainers") or []:
        for key, value in (c.get("resources") or {}).get("requests", {}).items():
            total[key] = max(total.get(key, Decimal(0)), parse_quantity(value))
    return total


def usage(kubectl: Kubectl, cluster_queue: str) -> dict[str, Decimal]:
    status = kubectl.json("get", "clusterqueue", cluster_queue).get("status") or {}
    out: dict[str, Decimal] = {}
    for flavor in status.get("flavorsUsage") or []:
        for resource in flavor["resources"]:
            out[resource["name"]] = out.get(resource["name"], Decimal(0)) + parse_quantity(
                resource["total"]
            )
    return {k: v for k, v in out.items() if v}


def outcomes(kubectl: Kubectl) -> dict[str, float]:
    return {
        outcome: metric(kubectl, REQUESTS, f'{{outcome="{outcome}",policy="{POLICY}"}}')
        for outcome in ("mutated", "unchanged")
    }


def unbound(kubectl: Kubectl, namespace: str) -> list[dict[str, Any]]:
    """Why each pod of the namespace is not on a node: what a failed placement is read by."""
    return [
        {
            "pod": p["metadata"]["name"],
            "gates": p["spec"].get("schedulingGates"),
            "nodeSelector": p["spec"].get("nodeSelector"),
            "conditions": (p.get("status") or {}).get("conditions"),
        }
        for p in pods(kubectl, namespace)
        if not p["spec"].get("nodeName")
    ]


def test_kueue_counts_what_the_pods_request(
    cluster: Cluster,
    kubectl: Kubectl,
    namespace: str,
    create: Create,
    local_queue: Callable[[str], None],
    tmp_path: Path,
) -> None:
    local_queue(kueue.CLUSTER_QUEUE)
    before_usage = usage(kubectl, kueue.CLUSTER_QUEUE)
    before = outcomes(kubectl)
    # One GPU a pod: single-numa-partial asks 96Gi per GPU on a single-numa-node machine,
    # whose NUMA nodes hold 125 GiB (dgx-a100-nps4), so a 2-GPU pod fits no node here
    # (test_explain.py) and would wait unscheduled forever.
    obj = job("train", gpus=1)
    (predicted,) = predict(kubectl, obj, namespace, REPO / "policies")
    expected = requests_of(predicted["spec"]["template"]["spec"])
    assert expected["cpu"] == 12 and expected["memory"] == 96 * 2**30  # 1 GPU's worth

    stored = json.loads(create(obj, namespace).stdout)
    assert stored["spec"]["suspend"] is True  # Kueue's webhook: held until admitted
    admitted = admitted_workload(kubectl, namespace, "train")

    # The Workload's podSet carries the mutated requests, for both pods.
    (pod_set,) = admitted["spec"]["podSets"]
    assert pod_set["count"] == 2
    assert requests_of(pod_set["template"]["spec"]) == expected

    # Kueue unsuspends the Job; its pods come out of the template already mutated.
    found = wait_pods(kubectl, namespace, "batch.kubernetes.io/job-name=train", 2)
    for pod in found:
        assert requests_of(pod["spec"]) == expected
        assert pod["metadata"]["annotations"][APPLIED_ANNOTATION].startswith(f"{POLICY}@")
    after = procs.wait_for(
        lambda: (now := outcomes(kubectl))["unchanged"] - before["unchanged"] >= 2 and now,
        "the pod webhook answering both pods with an empty patch",
        timeout=30,
    )
    assert after["mutated"] - before["mutated"] == 1  # the Job, once; never its pods

    # They land where the policy means: on nodes `explain` says fit the mutated pod.
    template = predicted["spec"]["template"]
    probe = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "train-probe"}, **template}
    probe["metadata"] = {**template["metadata"], "name": "train-probe"}
    verdicts = explain(cluster, probe, namespace, tmp_path)["nodes"]
    fits = {n["node"] for n in verdicts if n["fits"]}
    assert fits, verdicts  # else "bound where it fits" below could never hold

    def bound() -> list[dict[str, Any]] | None:
        found = pods(kubectl, namespace)
        return found if found and all(p["spec"].get("nodeName") for p in found) else None

    try:
        placed = procs.wait_for(bound, "both pods bound to nodes", timeout=60)
    except TimeoutError as exc:
        raise AssertionError(f"{exc}: {unbound(kubectl, namespace)}") from exc
    assert {p["spec"]["nodeName"] for p in placed} <= fits

    # The ClusterQueue counts exactly the mutated pods' requests.
    want = {k: v * 2 + before_usage.get(k, Decimal(0)) for k, v in expected.items()}
    procs.wait_for(
        lambda: usage(kubectl, kueue.CLUSTER_QUEUE) == want,
        f"ClusterQueue usage {want}",
        timeout=30,
        interval=0.5,
    )


def test_quota_only_the_mutation_uses_up_holds_the_second_job(
    kubectl: Kubectl,
    namespace: str,
    create: Create,
    local_queue: Callable[[str], None],
    tight_queue: str,
) -> None:
    local_queue(tight_queue)
    create(job("first", parallelism=1), namespace)
    admitted_workload(kubectl, namespace, "first")
    create(job("second", parallelism=1), namespace)

    def pending() -> dict[str, Any] | None:
        reserved = condition(workload(kubectl, namespace, "second"), "QuotaReserved")
        return reserved if reserved and reserved["status"] == "False" else None

    reserved = procs.wait_for(pending, "the second Workload pending on quota", timeout=60)
    assert reserved["reason"] == "Pending"
    # Only the mutation asks for CPU and memory: as written, both Jobs fit the 4 GPUs.
    assert re.search(r"insufficient unused quota for (cpu|memory)", reserved["message"]), reserved

    assert (condition(workload(kubectl, namespace, "second"), "Admitted") or {}).get(
        "status"
    ) != "True"

    kubectl("delete", "job", "first", "-n", namespace)
    admitted_workload(kubectl, namespace, "second")


@pytest.fixture
def kueue_after_us(kubectl: Kubectl) -> Iterator[None]:
    """Kueue's mutating webhooks renamed to sort after ours: the API server calls webhook
    configurations in name order, so ours runs first, then Kueue's (reinvocation both ways)."""
    original = kubectl.json(
        "get", "mutatingwebhookconfiguration", "kueue-mutating-webhook-configuration"
    )
    moved = _reinvoked(original, "zz-kueue-mutating-webhook-configuration")
    kubectl.apply(moved)
    kubectl("delete", "mutatingwebhookconfiguration", original["metadata"]["name"])
    yield
    kubectl.apply(_reinvoked(original, original["metadata"]["name"]))
    kubectl("delete", "mutatingwebhookconfiguration", moved["metadata"]["name"])


@pytest.fixture
def kueue_before_us(kubectl: Kubectl) -> Iterator[None]:
    """Kueue's own name sorts before ours: only its reinvocation policy is changed."""
    original = kubectl.json(
        "get", "mutatingwebhookconfiguration", "kueue-mutating-webhook-configuration"
    )
    kubectl.apply(_reinvoked(original, original["metadata"]["name"]))
    yield
    kubectl.apply(_fresh(original))


def _fresh(config: dict[str, Any]) -> dict[str, Any]:
    meta = {"name": config["metadata"]["name"]}
    return {**config, "metadata": meta}


def _reinvoked(config: dict[str, Any], name: str) -> dict[str, Any]:
    hooks = [{**h, "reinvocationPolicy": "IfNeeded"} for h in config["webhooks"]]
    return {**config, "metadata": {"name": name}, "webhooks": hooks}


@pytest.mark.parametrize("order", ["kueue_before_us", "kueue_after_us"])
def test_either_webhook_order_stores_a_job_suspended_and_mutated(
    request: pytest.FixtureRequest,
    kubectl: Kubectl,
    namespace: str,
    create: Create,
    local_queue: Callable[[str], None],
    order: str,
) -> None:
    request.getfixturevalue(order)
    local_queue(kueue.CLUSTER_QUEUE)
    names = [
        c["metadata"]["name"]
        for c in kubectl.json("get", "mutatingwebhookconfigurations")["items"]
        if "kueue" in c["metadata"]["name"] or "topoplace" in c["metadata"]["name"]
    ]
    ours, theirs = (
        names.index("topoplace-webhook"),
        next(i for i, n in enumerate(names) if "kueue" in n),
    )
    assert (theirs < ours) == (order == "kueue_before_us"), names
    obj = job(f"order-{order.split('_')[1]}", parallelism=1)
    (predicted,) = predict(kubectl, obj, namespace, REPO / "policies")
    stored = json.loads(create(obj, namespace).stdout)
    assert stored["spec"]["suspend"] is True
    template = stored["spec"]["template"]
    assert template["metadata"]["labels"][POLICY_LABEL] == POLICY
    assert requests_of(template["spec"]) == requests_of(predicted["spec"]["template"]["spec"])
    assert template["metadata"]["annotations"][APPLIED_ANNOTATION].startswith(f"{POLICY}@")
    admitted_workload(kubectl, namespace, obj["metadata"]["name"])


def test_a_jobsets_podsets_carry_the_mutated_requests(
    kubectl: Kubectl, namespace: str, create: Create, local_queue: Callable[[str], None]
) -> None:
    """JobSet's CRD is installed (no JobSet controller): Kueue's Workload is checked only."""
    local_queue(kueue.CLUSTER_QUEUE)
    template = job("unused")["spec"]["template"]
    obj = {
        "apiVersion": "jobset.x-k8s.io/v1alpha2",
        "kind": "JobSet",
        "metadata": {
            "name": "llm",
            "labels": {kueue.QUEUE_NAME_LABEL: QUEUE, POLICY_LABEL: POLICY},
        },
        "spec": {
            "replicatedJobs": [
                {
                    "name": f"workers-{i}",
                    "replicas": 1,
                    "template": {
                        "spec": {"parallelism": 2, "completions": 2, "template": template}
                    },
                }
                for i in range(2)
            ]
        },
    }
    (predicted,) = predict(kubectl, obj, namespace, REPO / "policies")
    expected = [
        requests_of(r["template"]["spec"]["template"]["spec"])
        for r in predicted["spec"]["replicatedJobs"]
    ]
    assert all(e["cpu"] == 24 for e in expected)
    stored = json.loads(create(obj, namespace).stdout)
    assert stored["spec"]["suspend"] is True

    def made() -> dict[str, Any] | None:
        for item in kubectl.json("get", "workloads.kueue.x-k8s.io", "-n", namespace)["items"]:
            owners = item["metadata"].get("ownerReferences") or []
            if any(o["kind"] == "JobSet" and o["name"] == "llm" for o in owners):
                return item
        return None

    found = procs.wait_for(made, "Kueue's Workload for the JobSet", timeout=60, interval=0.5)
    pod_sets = found["spec"]["podSets"]
    assert [p["name"] for p in pod_sets] == ["workers-0", "workers-1"]
    assert [p["count"] for p in pod_sets] == [2, 2]
    assert [requests_of(p["template"]["spec"]) for p in pod_sets] == expected
