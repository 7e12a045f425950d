"""The audit per workload from pods and node labels: which workload a pod is of, the domains
its pods span at each level and the most hops, in the table and the JSON."""

from __future__ import annotations

from tests.webhook.spans.fleet import node_labels, pod
from webhook.spans.report import to_json, to_table, workload_spans
from webhook.spans.workloads import WorkloadRef, workload_of

JOB = {"batch.kubernetes.io/job-name": "train", "batch.kubernetes.io/controller-uid": "u1"}


def test_a_pod_is_of_the_outermost_workload_its_labels_name() -> None:
    jobset_pod = pod("js-0", "w1", {
        "jobset.sigs.k8s.io/jobset-name": "big",
        "batch.kubernetes.io/job-name": "big-workers-0",  # its child Job's label too
    })  # fmt: skip
    lws_pod = pod("lws-1-0", "w1", {
        "leaderworkerset.sigs.k8s.io/name": "serve",
        "leaderworkerset.sigs.k8s.io/group-index": "1",
    })  # fmt: skip
    kubeflow = pod("pt-0", "w1", {"training.kubeflow.org/job-name": "pt"})
    assert workload_of(jobset_pod) == WorkloadRef("ml", "JobSet", "big")
    assert workload_of(lws_pod) == WorkloadRef("ml", "LeaderWorkerSet", "serve/1")
    assert workload_of(kubeflow) == WorkloadRef("ml", "PyTorchJob", "pt")
    assert workload_of(pod("j-0", "w1", JOB)) == WorkloadRef("ml", "Job", "train")
    assert workload_of(pod("lone", "w1", {})) is None
    assert workload_of({"metadata": {"labels": ["not", "a", "map"]}}) is None


def test_a_job_in_one_sub_block_spans_one_domain_per_level_and_one_hop() -> None:
    pods = [pod(f"train-{i}", n, JOB) for i, n in enumerate(["w1", "w1", "w2", "w2"])]
    (row,) = workload_spans(pods, node_labels("w1", "w2", "w3", "w4", "w5"))
    assert (row.span.pods, row.span.nodes, row.span.max_hops) == (4, 2, 1)
    assert row.span.domains == {
        "nvlink-domain": 0,
        "network-tier-1": 1,
        "network-tier-2": 1,
        "network-tier-3": 1,
    }


def test_a_job_over_two_blocks_says_so_and_counts_the_hops_through_tier_3() -> None:
    pods = [pod(f"train-{i}", n, JOB) for i, n in enumerate(["w1", "w3", "w4", "w5"])]
    (row,) = workload_spans(pods, node_labels("w1", "w2", "w3", "w4", "w5"))
    assert row.span.domains["network-tier-2"] == 2
    assert row.span.domains["network-tier-1"] == 4
    assert row.span.max_hops == 5  # w1..w4 share only tier 3
    header, line = to_table([row]).splitlines()[:2]
    cells = dict(zip(header.replace("MOST HOPS", "MOST-HOPS").split(), line.split(), strict=True))
    assert cells["NETWORK-TIER-2"] == "2" and cells["MOST-HOPS"] == "5"
    assert cells["NVLINK-DOMAIN"] == "-"  # none of its nodes carries that level


def test_finished_and_unbound_pods_are_not_placed() -> None:
    pods = [
        pod("train-0", "w1", JOB),
        pod("train-1", "w4", JOB, phase="Succeeded"),
        pod("train-2", "w5", JOB, phase="Failed"),
        pod("train-3", None, JOB, phase="Pending"),
        pod("train-4", "w2", JOB, phase="Pending"),  # bound, starting: it holds its place
    ]
    (row,) = workload_spans(pods, node_labels("w1", "w2", "w4", "w5"))
    assert (row.span.pods, row.span.nodes, row.span.domains["network-tier-2"]) == (2, 2, 1)


def test_a_node_without_position_labels_makes_the_hops_unknown_not_near() -> None:
    pods = [pod("train-0", "w1", JOB), pod("train-1", "cpu-7", JOB)]
    rows = workload_spans(pods, node_labels("w1", "cpu-7"))
    (row,) = rows
    assert row.span.max_hops is None and row.span.unknown_pairs == 1
    line = to_table(rows).splitlines()[1]
    assert "1+?" in line and "unknown (1 node pairs share no tier)" in line
    doc = to_json(rows)["workloads"][0]
    assert doc["maxHops"] is None and doc["unknownHopPairs"] == 1
    assert doc["unlabelledNodes"]["network-tier-2"] == 1 and doc["domains"]["network-tier-2"] == 1


def test_workloads_are_told_apart_by_namespace_and_sorted() -> None:
    pods = [
        pod("train-0", "w1", JOB, namespace="team-b"),
        pod("train-0", "w4", JOB, namespace="team-a"),
        pod("lone", "w2", {}),
    ]
    rows = workload_spans(pods, node_labels("w1", "w2", "w4"))
    assert [(r.ref.namespace, r.ref.name, r.span.pods) for r in rows] == [
        ("team-a", "train", 1),
        ("team-b", "train", 1),
    ]
    assert to_table([]) == "no running workload pods found\n"
