"""keepTogether through Kubernetes v1.37's Workload API: a Job's spec.scheduling, a PodGroup's
topology constraint, the discovery of API and gates, and the bad input around them.

Bodies are real: the Job as `kubectl create` sends it, the PodGroups of upstream's
scheduler_perf TAS templates; the results are validated against the v1.37.2 OpenAPI schemas
(openapi-v1.37.2-scheduling.json, cut from kubernetes/api/openapi-spec/v3), strictly.
"""

from __future__ import annotations

import base64
import copy
import json
from pathlib import Path
from typing import Any

import jsonpatch
import jsonschema
import pytest

from tests.kube import assert_valid
from tests.webhook.builders import SETTINGS, container, make_pod, policy_doc, write_yaml
from tests.webhook.server.conftest import admission_review
from webhook.engine.recipe import mutate
from webhook.policy.loader import PolicySet, load_policy_dir
from webhook.server.review import parse_review
from webhook.server.workload_admission import WorkloadAdmitter
from webhook.vocabulary import POLICY_LABEL
from webhook.workloads.gangs import WorkloadScheduling, parse_gates, parse_resources
from webhook.workloads.mutation import mutate_workload

TIER2 = "topoplace.io/network-tier-2"
ALL_ON = {"GenericWorkload": True, "TopologyAwareWorkloadScheduling": True, "WorkloadWithJob": True}
SERVED = frozenset({"podgroups", "podgroups/status", "workloads"})
ON = WorkloadScheduling(SERVED, ALL_ON)
_SCHEMAS = json.loads((Path(__file__).parent / "openapi-v1.37.2-scheduling.json").read_text())


def _strict(schema: Any) -> Any:
    """Unknown fields are errors, as in kubernetes-validate's -strict schemas."""
    if isinstance(schema, dict):
        out = {k: _strict(v) for k, v in schema.items()}
        if "properties" in out and "additionalProperties" not in out:
            out["additionalProperties"] = False
        return out
    return [_strict(v) for v in schema] if isinstance(schema, list) else schema


def _valid_v137(obj: Any, name: str) -> None:
    root = _strict(_SCHEMAS) | {"$ref": f"#/components/schemas/{name}"}
    error = jsonschema.exceptions.best_match(jsonschema.Draft202012Validator(root).iter_errors(obj))
    assert error is None, f"{'/'.join(map(str, error.absolute_path))}: {error.message}"


def _valid_job(job: dict[str, Any]) -> None:
    """The Job against kubernetes-validate's schema, its spec.scheduling against v1.37.2's."""
    scheduling = job["spec"].get("scheduling")
    if scheduling is not None:
        _valid_v137(scheduling, "io.k8s.api.batch.v1.JobSchedulingConfiguration")
    assert_valid({**job, "spec": {k: v for k, v in job["spec"].items() if k != "scheduling"}})


def _policies(tmp_path: Path, **rule: Any) -> PolicySet:
    keep = {"level": "network-tier-2", **rule}
    write_yaml(tmp_path / "p.yaml", policy_doc("p", placement={"keepTogether": keep}))
    return load_policy_dir(tmp_path)


def _job(*, queue: bool = False, group: str | None = None) -> dict[str, Any]:
    labels = {POLICY_LABEL: "p"} | ({"kueue.x-k8s.io/queue-name": "team"} if queue else {})
    spec: dict[str, Any] = {"restartPolicy": "Never", "containers": [container(gpus=1)]}
    if group:
        spec["schedulingGroup"] = {"podGroupName": group}
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": "train", "labels": labels},
        "spec": {"parallelism": 4, "completions": 4, "template": {"spec": spec}},
    }


def _applied(
    obj: dict[str, Any], policies: PolicySet, scheduling: WorkloadScheduling | None
) -> tuple[dict[str, Any], list[str]]:
    result = mutate_workload(copy.deepcopy(obj), "ml", policies, SETTINGS, scheduling=scheduling)
    after = jsonpatch.apply_patch(obj, result.patch)
    assert after == result.obj
    again = mutate_workload(after, "ml", policies, SETTINGS, scheduling=scheduling)
    assert again.patch == []  # idempotent
    return after, result.warnings


def _affinity(job: dict[str, Any]) -> Any:
    """The pod affinity keepTogether may write (node affinity holds the kubelet shapes)."""
    return (job["spec"]["template"]["spec"].get("affinity") or {}).get("podAffinity")


def test_a_job_asks_the_job_controller_for_a_gang_in_one_domain(tmp_path: Path) -> None:
    after, warnings = _applied(_job(), _policies(tmp_path), ON)
    assert after["spec"]["scheduling"] == {
        "schedulingPolicy": {"gang": {}},  # minCount: the Job's parallelism (upstream default)
        "schedulingConstraints": {"topology": [{"key": TIER2}]},
    }
    assert _affinity(after) is None  # no first-pod affinity where the PodGroup keeps them
    assert not [w for w in warnings if "keepTogether" in w]
    _valid_job(after)


def test_a_job_with_generate_name_is_kept_together_too(tmp_path: Path) -> None:
    job = _job()
    job["metadata"] = {"generateName": "train-", "labels": job["metadata"]["labels"]}
    after, _ = _applied(job, _policies(tmp_path), ON)
    assert after["spec"]["scheduling"]["schedulingConstraints"]["topology"] == [{"key": TIER2}]


def test_a_queued_job_keeps_kueues_annotations_and_gets_no_podgroup(tmp_path: Path) -> None:
    after, _ = _applied(_job(queue=True), _policies(tmp_path), ON)
    annotations = after["spec"]["template"]["metadata"]["annotations"]
    kueue = {k: v for k, v in annotations.items() if k.startswith("kueue.x-k8s.io/")}
    assert kueue == {"kueue.x-k8s.io/podset-required-topology": TIER2}
    assert "scheduling" not in after["spec"] and _affinity(after) is None


@pytest.mark.parametrize(
    ("scheduling", "why"),
    [
        (WorkloadScheduling(frozenset(), ALL_ON), "does not serve scheduling.k8s.io/v1beta1"),
        (WorkloadScheduling(SERVED, ALL_ON | {"WorkloadWithJob": False}), "WorkloadWithJob off"),
        (
            WorkloadScheduling(SERVED, {"GenericWorkload": True}),
            "TopologyAwareWorkloadScheduling, WorkloadWithJob off",
        ),
        (WorkloadScheduling(SERVED, None), "feature gates are not known"),
    ],
)
def test_without_the_api_or_a_gate_the_affinity_stays_and_says_why(
    tmp_path: Path, scheduling: WorkloadScheduling, why: str
) -> None:
    after, warnings = _applied(_job(), _policies(tmp_path), scheduling)
    assert "scheduling" not in after["spec"]
    assert _affinity(after)["requiredDuringSchedulingIgnoredDuringExecution"]
    (weak,) = [w for w in warnings if "first pod's affinity" in w]
    assert why in weak


def test_not_known_yet_keeps_todays_mechanism_silently(tmp_path: Path) -> None:
    after, warnings = _applied(_job(), _policies(tmp_path), None)
    assert "scheduling" not in after["spec"] and _affinity(after) is not None
    assert not [w for w in warnings if "affinity" in w]


def test_preferred_has_no_podgroup_counterpart(tmp_path: Path) -> None:
    after, warnings = _applied(_job(), _policies(tmp_path, mode="preferred"), ON)
    assert "scheduling" not in after["spec"]
    assert _affinity(after)["preferredDuringSchedulingIgnoredDuringExecution"]
    assert any("required only" in w for w in warnings)


def test_a_users_own_constraint_and_policy_are_kept_with_a_warning(tmp_path: Path) -> None:
    job = _job()
    job["spec"]["scheduling"] = {
        "schedulingPolicy": {"basic": {}},
        "schedulingConstraints": {"topology": [{"key": "topology.kubernetes.io/rack"}]},
    }
    after, warnings = _applied(job, _policies(tmp_path), ON)
    assert after["spec"]["scheduling"] == job["spec"]["scheduling"]
    (kept,) = [w for w in warnings if "is kept" in w]
    assert "topology.kubernetes.io/rack" in kept and TIER2 in kept
    # Not known yet, but the user asked for a PodGroup: no affinity beside it either.
    after, _ = _applied(job, _policies(tmp_path), None)
    assert _affinity(after) is None


def test_a_users_gang_without_a_constraint_gets_the_levels(tmp_path: Path) -> None:
    job = _job()
    job["spec"]["scheduling"] = {"schedulingPolicy": {"gang": {"minCount": 2}}}
    after, warnings = _applied(job, _policies(tmp_path), ON)
    assert after["spec"]["scheduling"] == {
        "schedulingPolicy": {"gang": {"minCount": 2}},
        "schedulingConstraints": {"topology": [{"key": TIER2}]},
    }
    assert not [w for w in warnings if "keepTogether" in w]
    _valid_job(after)


def test_pods_naming_their_podgroup_are_left_to_it(tmp_path: Path) -> None:
    after, warnings = _applied(_job(group="gang-0"), _policies(tmp_path), ON)
    assert "scheduling" not in after["spec"] and _affinity(after) is None
    assert not [w for w in warnings if "keepTogether" in w]
    _, warnings = _applied(_job(group="gang-0"), _policies(tmp_path), WorkloadScheduling(SERVED))
    assert any("PodGroup gang-0 cannot keep its pods" in w for w in warnings)


def test_pods_naming_two_podgroups_are_left_as_written(tmp_path: Path) -> None:
    def job(name: str, group: str) -> dict[str, Any]:
        pod = {"spec": {"restartPolicy": "Never", "containers": [container(gpus=1)]}}
        pod["spec"]["schedulingGroup"] = {"podGroupName": group}
        return {"name": name, "replicas": 1, "template": {"spec": {"template": pod}}}

    jobset = {
        "apiVersion": "jobset.x-k8s.io/v1alpha2",
        "kind": "JobSet",
        "metadata": {"name": "llm", "labels": {POLICY_LABEL: "p"}},
        "spec": {"replicatedJobs": [job("a", "gang-a"), job("b", "gang-b")]},
    }
    after, warnings = _applied(jobset, _policies(tmp_path), ON)
    for replicated in after["spec"]["replicatedJobs"]:
        assert "podAffinity" not in replicated["template"]["spec"]["template"]["spec"].get(
            "affinity", {}
        )
    (two,) = [w for w in warnings if "PodGroups" in w]
    assert "2 PodGroups (gang-a, gang-b)" in two and "left as written" in two
    # One template in a group, the other in none: not one group either.
    del jobset["spec"]["replicatedJobs"][1]["template"]["spec"]["template"]["spec"][
        "schedulingGroup"
    ]
    after, warnings = _applied(jobset, _policies(tmp_path), ON)
    assert any("2 PodGroups (gang-a, no group)" in w for w in warnings)
    assert "podAffinity" not in after["spec"]["replicatedJobs"][1]["template"]["spec"]["template"][
        "spec"
    ].get("affinity", {})


def test_a_pod_naming_its_group_is_no_lone_pod(tmp_path: Path) -> None:
    pod = make_pod(policy="p")
    pod["spec"]["schedulingGroup"] = {"podGroupName": "gang-0"}
    result = mutate(pod, "ml", _policies(tmp_path), SETTINGS)
    assert result.allowed and not any("lone pod" in w for w in result.warnings)


# --- PodGroups through the admission webhook ---------------------------------------------


def _pod_group(**spec: Any) -> dict[str, Any]:
    """upstream test/integration/scheduler_perf/podgroup/gangscheduling/templates/podgroup.yaml"""
    return {
        "apiVersion": "scheduling.k8s.io/v1beta1",
        "kind": "PodGroup",
        "metadata": {"name": "gang-0", "namespace": "ml-team", "labels": {POLICY_LABEL: "p"}},
        "spec": {"schedulingPolicy": {"gang": {"minCount": 4}}, **spec},
    }


def _admit(
    group: dict[str, Any],
    policies: PolicySet,
    scheduling: WorkloadScheduling | None = ON,
    carries: Any = None,
) -> tuple[dict[str, Any], list[str]]:
    admitter = WorkloadAdmitter(
        None,  # type: ignore[arg-type]  # a PodGroup never reaches the pod path
        lambda: policies,
        SETTINGS,
        carries=carries,
        scheduling=lambda: scheduling,
    )
    review = admission_review(
        group, kind=("scheduling.k8s.io", "v1beta1", "PodGroup"), resource="podgroups"
    )
    response = admitter.admit(parse_review(json.dumps(review))).review["response"]
    assert response["allowed"] is True  # a PodGroup is never refused
    ops = json.loads(base64.b64decode(response["patch"])) if "patch" in response else []
    return jsonpatch.apply_patch(group, ops), response.get("warnings", [])


def test_a_labelled_podgroup_gets_the_levels_constraint(tmp_path: Path) -> None:
    after, warnings = _admit(_pod_group(), _policies(tmp_path))
    assert after["spec"]["schedulingConstraints"] == {"topology": [{"key": TIER2}]}
    assert after["spec"]["schedulingPolicy"] == {"gang": {"minCount": 4}}
    assert not warnings
    _valid_v137(after, "io.k8s.api.scheduling.v1beta1.PodGroup")


def test_a_podgroups_own_constraint_is_kept_with_a_warning(tmp_path: Path) -> None:
    """upstream .../podgroup/tas/templates/podgroup.yaml: a rack constraint already set."""
    own = _pod_group(schedulingConstraints={"topology": [{"key": "topology.kubernetes.io/rack"}]})
    after, warnings = _admit(own, _policies(tmp_path))
    assert after == own
    assert any("topology.kubernetes.io/rack" in w and "is kept" in w for w in warnings)


def test_a_basic_podgroup_is_constrained_and_told_it_is_no_gang(tmp_path: Path) -> None:
    basic = _pod_group()
    basic["spec"]["schedulingPolicy"] = {"basic": {}}
    after, warnings = _admit(basic, _policies(tmp_path))
    assert after["spec"]["schedulingPolicy"] == {"basic": {}}
    assert after["spec"]["schedulingConstraints"] == {"topology": [{"key": TIER2}]}
    assert any("not scheduled all-or-nothing" in w for w in warnings)


@pytest.mark.parametrize(
    ("scheduling", "rule", "why"),
    [
        (WorkloadScheduling(SERVED, {"GenericWorkload": True}), {}, "TopologyAware"),
        (WorkloadScheduling(frozenset(), ALL_ON), {}, "does not serve"),
        (ON, {"mode": "preferred"}, "required only"),
    ],
)
def test_a_podgroup_is_left_unchanged_where_the_constraint_would_not_hold(
    tmp_path: Path, scheduling: WorkloadScheduling, rule: dict[str, Any], why: str
) -> None:
    group = _pod_group()
    after, warnings = _admit(group, _policies(tmp_path, **rule), scheduling)
    assert after == group
    assert any(why in w for w in warnings)


def test_a_podgroup_naming_a_missing_policy_is_admitted_unchanged(tmp_path: Path) -> None:
    group = _pod_group()
    group["metadata"]["labels"][POLICY_LABEL] = "nope"
    after, warnings = _admit(group, _policies(tmp_path))
    assert after == group and any("policy nope not found" in w for w in warnings)


def test_a_podgroup_on_a_level_no_node_carries_is_warned(tmp_path: Path) -> None:
    after, warnings = _admit(_pod_group(), _policies(tmp_path), carries=lambda key: key != TIER2)
    assert after["spec"]["schedulingConstraints"] == {"topology": [{"key": TIER2}]}
    assert any("no node carries" in w and "Pending" in w for w in warnings)


# --- discovery: what the API server says -------------------------------------------------

# GET /apis/scheduling.k8s.io/v1beta1 on the e2e cluster (v1.37.2, --runtime-config on).
_RESOURCES = {
    "kind": "APIResourceList",
    "apiVersion": "v1",
    "groupVersion": "scheduling.k8s.io/v1beta1",
    "resources": [
        {"name": "podgroups", "singularName": "podgroup", "namespaced": True, "kind": "PodGroup"},
        {"name": "podgroups/status", "singularName": "", "namespaced": True, "kind": "PodGroup"},
        {"name": "workloads", "singularName": "workload", "namespaced": True, "kind": "Workload"},
    ],
}
# Lines of GET /metrics (component-base/metrics/prometheus/feature), among thousands.
_HELP = "[BETA] This metric records the data about the stage and enablement of a k8s feature."
_METRICS = (
    f"# HELP kubernetes_feature_enabled {_HELP}\n"
    + """\
# TYPE kubernetes_feature_enabled gauge
kubernetes_feature_enabled{name="GenericWorkload",stage="BETA"} 1
kubernetes_feature_enabled{name="GitRepoVolumeDriver",stage="DEPRECATED"} 0
kubernetes_feature_enabled{name="TopologyAwareWorkloadScheduling",stage="ALPHA"} 1
kubernetes_feature_enabled{name="WorkloadWithJob",stage="ALPHA"} 0
"""
)


def test_discovery_reads_resources_and_gates() -> None:
    seen = WorkloadScheduling(parse_resources(_RESOURCES), parse_gates(_METRICS))
    assert seen.pod_groups and not seen.jobs
    assert seen.lacking(jobs=True) == "feature gate WorkloadWithJob off"
    assert "GenericWorkload on" in seen.describe() and "WorkloadWithJob off" in seen.describe()
    assert parse_resources({"kind": "Status"}) == frozenset()
    assert parse_gates("garbage\n{}\n") == {}


def test_validate_says_which_mechanism_each_workload_gets(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from webhook.cli.main import main as webhook_main

    _policies(tmp_path)
    assert webhook_main(["validate", str(tmp_path)]) == 0
    (note,) = [line for line in capsys.readouterr().err.splitlines() if "keepTogether" in line]
    assert note.startswith("note: ") and "policy p: keepTogether network-tier-2 (required)" in note
    assert "a Job: a gang PodGroup (spec.scheduling) where the cluster serves" in note
    assert "Kueue's topology annotations" in note and "exclusive-topology" in note


def test_mechanisms_on_a_cluster_that_was_looked_at(tmp_path: Path) -> None:
    from webhook.workloads.gangs import mechanisms

    rule = _policies(tmp_path)["p"].spec.placement.keep_together
    assert rule is not None
    assert "a Job: a gang PodGroup in one domain" in mechanisms(rule, ON)
    off = WorkloadScheduling(SERVED, ALL_ON | {"TopologyAwareWorkloadScheduling": False})
    assert "a Job: the first pod's affinity (feature gate TopologyAware" in mechanisms(rule, off)
