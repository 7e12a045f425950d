"""keepTogether on the workloads the webhook mutates: Kueue's annotations under a queue,
exclusive-topology where it fits, pod affinity otherwise; the patches apply and validate."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import jsonpatch
import pytest

from tests.kube import assert_valid
from tests.webhook.builders import SETTINGS, container, make_pod, policy_doc, write_yaml
from webhook.engine.recipe import mutate
from webhook.policy.loader import PolicySet, load_policy_dir
from webhook.vocabulary import POLICY_LABEL
from webhook.workloads.mutation import mutate_workload

TIER2 = "topoplace.io/network-tier-2"
REQUIRED = "kueue.x-k8s.io/podset-required-topology"
PREFERRED = "kueue.x-k8s.io/podset-preferred-topology"


def _policies(tmp_path: Path, **rule: Any) -> PolicySet:
    keep = {"level": "network-tier-2", **rule}
    write_yaml(tmp_path / "p.yaml", policy_doc("p", placement={"keepTogether": keep}))
    return load_policy_dir(tmp_path)


def _template() -> dict[str, Any]:
    return {"spec": {"restartPolicy": "Never", "containers": [container(gpus=1)]}}


def _job(queue: bool = False, name: str | None = "train") -> dict[str, Any]:
    labels = {POLICY_LABEL: "p"} | ({"kueue.x-k8s.io/queue-name": "team"} if queue else {})
    meta: dict[str, Any] = {"labels": labels}
    if name:
        meta["name"] = name
    else:
        meta["generateName"] = "train-"
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": meta,
        "spec": {"parallelism": 4, "template": _template()},
    }


def _jobset(jobs: int) -> dict[str, Any]:
    replicated = [
        {"name": f"w{i}", "replicas": 1, "template": {"spec": {"template": _template()}}}
        for i in range(jobs)
    ]
    return {
        "apiVersion": "jobset.x-k8s.io/v1alpha2",
        "kind": "JobSet",
        "metadata": {"name": "llm", "labels": {POLICY_LABEL: "p"}},
        "spec": {"replicatedJobs": replicated},
    }


def _lws() -> dict[str, Any]:
    return {
        "apiVersion": "leaderworkerset.x-k8s.io/v1",
        "kind": "LeaderWorkerSet",
        "metadata": {"name": "serve", "labels": {POLICY_LABEL: "p"}},
        "spec": {"leaderWorkerTemplate": {"size": 4, "workerTemplate": _template()}},
    }


def _applied(obj: dict[str, Any], policies: PolicySet) -> tuple[dict[str, Any], list[str]]:
    result = mutate_workload(copy.deepcopy(obj), "ml", policies, SETTINGS)
    after = jsonpatch.apply_patch(obj, result.patch)
    assert after == result.obj  # the patch the API server applies gives what we computed
    again = mutate_workload(after, "ml", policies, SETTINGS)
    assert again.patch == []  # idempotent
    return after, result.warnings


def test_under_kueue_each_template_gets_the_required_topology(tmp_path: Path) -> None:
    after, _ = _applied(_job(queue=True), _policies(tmp_path))
    annotations = after["spec"]["template"]["metadata"]["annotations"]
    assert annotations[REQUIRED] == TIER2
    # Kueue does the keeping: no pod affinity (the node affinity holds the kubelet shapes)
    assert "podAffinity" not in after["spec"]["template"]["spec"].get("affinity", {})
    assert "schedulingGates" not in after["spec"]["template"]["spec"]  # Kueue's own gate
    assert_valid(after)


def test_under_kueue_preferred_and_slices(tmp_path: Path) -> None:
    after, _ = _applied(_job(queue=True), _policies(tmp_path, mode="preferred"))
    assert after["spec"]["template"]["metadata"]["annotations"][PREFERRED] == TIER2
    after, _ = _applied(_job(queue=True), _policies(tmp_path, sliceSize=2))
    annotations = after["spec"]["template"]["metadata"]["annotations"]
    assert annotations["kueue.x-k8s.io/podset-slice-required-topology"] == TIER2
    assert annotations["kueue.x-k8s.io/podset-slice-size"] == "2"
    assert annotations[PREFERRED] == TIER2 and REQUIRED not in annotations


def test_a_users_own_kueue_annotation_is_kept_with_a_warning(tmp_path: Path) -> None:
    job = _job(queue=True)
    job["spec"]["template"]["metadata"] = {"annotations": {PREFERRED: "rack"}}
    after, warnings = _applied(job, _policies(tmp_path))
    annotations = after["spec"]["template"]["metadata"]["annotations"]
    assert annotations[PREFERRED] == "rack" and REQUIRED not in annotations
    assert any("own Kueue topology annotations are kept" in w for w in warnings)


def test_without_kueue_a_job_gets_required_pod_affinity_to_its_own_pods(tmp_path: Path) -> None:
    after, _ = _applied(_job(), _policies(tmp_path))
    (term,) = after["spec"]["template"]["spec"]["affinity"]["podAffinity"][
        "requiredDuringSchedulingIgnoredDuringExecution"
    ]
    assert term == {
        "labelSelector": {"matchLabels": {"batch.kubernetes.io/job-name": "train"}},
        "topologyKey": TIER2,
    }
    assert_valid(after)
    preferred, _ = _applied(_job(), _policies(tmp_path, mode="preferred"))
    (weighted,) = preferred["spec"]["template"]["spec"]["affinity"]["podAffinity"][
        "preferredDuringSchedulingIgnoredDuringExecution"
    ]
    assert weighted["podAffinityTerm"]["topologyKey"] == TIER2


def test_a_job_without_a_name_yet_is_not_kept_together_and_says_so(tmp_path: Path) -> None:
    after, warnings = _applied(_job(name=None), _policies(tmp_path))
    assert "podAffinity" not in after["spec"]["template"]["spec"].get("affinity", {})
    assert any("generateName" in w for w in warnings)


def test_jobset_of_one_job_uses_exclusive_topology_else_affinity(tmp_path: Path) -> None:
    policies = _policies(tmp_path)
    one, _ = _applied(_jobset(1), policies)
    assert one["metadata"]["annotations"]["alpha.jobset.sigs.k8s.io/exclusive-topology"] == TIER2
    many, _ = _applied(_jobset(3), policies)
    assert "annotations" not in many["metadata"]
    for job in many["spec"]["replicatedJobs"]:
        spec = job["template"]["spec"]["template"]["spec"]
        (term,) = spec["affinity"]["podAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
        assert term["labelSelector"]["matchLabels"] == {"jobset.sigs.k8s.io/jobset-name": "llm"}


def test_lws_groups_get_exclusive_topology(tmp_path: Path) -> None:
    after, _ = _applied(_lws(), _policies(tmp_path))
    assert after["metadata"]["annotations"]["leaderworkerset.sigs.k8s.io/exclusive-topology"] == (
        TIER2
    )
    _, warnings = _applied(_lws(), _policies(tmp_path, mode="preferred"))
    assert any("required, not preferred" in w for w in warnings)


def test_a_lone_pod_is_mutated_as_today_with_a_warning(tmp_path: Path) -> None:
    policies = _policies(tmp_path)
    pod = make_pod(policy="p")
    result = mutate(pod, "ml", policies, SETTINGS)
    assert result.allowed and result.patch
    assert any("cannot keep a lone pod" in w for w in result.warnings)
    owned = copy.deepcopy(pod)
    owned["metadata"]["ownerReferences"] = [{"apiVersion": "batch/v1", "kind": "Job"}]
    assert not any("lone pod" in w for w in mutate(owned, "ml", policies, SETTINGS).warnings)


@pytest.mark.parametrize(
    ("rule", "problem"),
    [
        ({"level": "rack"}, "spec.placement.keepTogether.level"),
        ({"level": "network-tier-1", "mode": "preferred", "sliceSize": 2}, "sliceSize needs"),
        ({"level": "network-tier-1", "sliceSize": 0}, "sliceSize"),
        ({"level": "network-tier-1", "spread": True}, "spread"),
    ],
)
def test_bad_rules_are_named(tmp_path: Path, rule: dict[str, Any], problem: str) -> None:
    from webhook.policy.loader import PolicyLoadError

    write_yaml(tmp_path / "p.yaml", policy_doc("p", placement={"keepTogether": rule}))
    with pytest.raises(PolicyLoadError) as caught:
        load_policy_dir(tmp_path)
    assert problem in "; ".join(caught.value.messages)


def test_admission_warns_naming_a_level_no_node_carries(tmp_path: Path) -> None:
    import json

    from tests.webhook.server.conftest import admission_review
    from webhook.server.review import parse_review
    from webhook.server.workload_admission import WorkloadAdmitter

    policies = _policies(tmp_path)
    asked: list[str] = []

    def carries(key: str) -> bool | None:
        asked.append(key)
        return key != TIER2

    def warnings_with(answer: Any) -> list[str]:
        admitter = WorkloadAdmitter(None, lambda: policies, SETTINGS, carries=answer)  # type: ignore[arg-type]
        review = admission_review(_job(), kind=("batch", "v1", "Job"), resource="jobs")
        return (
            admitter.admit(parse_review(json.dumps(review))).review["response"].get("warnings", [])
        )

    (warning,) = [w for w in warnings_with(carries) if "no node carries" in w]
    assert "network-tier-2" in warning and TIER2 in warning and "Pending" in warning
    assert asked == [TIER2]
    assert not [w for w in warnings_with(lambda _k: None) if "no node carries" in w]  # cold
