"""Workload-level mutation: each template gets its pods' patch, and its pods then get none."""

from __future__ import annotations

import copy
from dataclasses import replace
from typing import Any

import jsonpatch
import pytest

from tests.conftest import REPO_ROOT
from tests.kube import assert_valid, qos_class
from tests.webhook.builders import SETTINGS, container
from webhook.engine.pod_fields import InvalidPod
from webhook.engine.recipe import mutate
from webhook.policy.loader import load_policy_dir
from webhook.vocabulary import APPLIED_ANNOTATION, POLICY_LABEL
from webhook.workloads.mutation import mutate_workload
from webhook.workloads.templates import pod_templates

POLICY = "ddp-hgx-full-node"  # shipped: Guaranteed, cpu/memory per GPU, RDMA, prefetch


@pytest.fixture(scope="module")
def shipped():
    return load_policy_dir(REPO_ROOT / "policies")


def template(*, policy: str | None = POLICY, cpu: str | None = "500m") -> dict[str, Any]:
    trainer = container(gpus=8, command=["torchrun", "--nproc-per-node=8", "train.py"])
    if cpu is not None:
        trainer["resources"]["requests"] = {"cpu": cpu}
    labels = {"app": "train"} | ({POLICY_LABEL: policy} if policy else {})
    return {
        "metadata": {"labels": labels},
        "spec": {"restartPolicy": "Never", "containers": [trainer]},
    }


def job(
    *, policy: str | None = None, template_policy: str | None = POLICY, cpu: str | None = "500m"
) -> dict[str, Any]:
    labels = {"kueue.x-k8s.io/queue-name": "team"} | ({POLICY_LABEL: policy} if policy else {})
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": "train", "namespace": "ml-team", "labels": labels},
        "spec": {"parallelism": 2, "template": template(policy=template_policy, cpu=cpu)},
    }


def jobset(replicated: int = 4) -> dict[str, Any]:
    jobs = [
        {"name": f"workers-{i}", "replicas": 1, "template": {"spec": {"template": template()}}}
        for i in range(replicated)
    ]
    return {
        "apiVersion": "jobset.x-k8s.io/v1alpha2",
        "kind": "JobSet",
        "metadata": {"name": "llm"},
        "spec": {"replicatedJobs": jobs},
    }


def pod_from(template: dict[str, Any], *, ordinal: int = 0) -> dict[str, Any]:
    """What the job controller and the API server's built-in admission make of a template:
    controller labels and owner, generateName, and the service-account token volume mounted
    in every container, injected ones included."""
    pod = copy.deepcopy(template)
    meta = pod.setdefault("metadata", {})
    meta["generateName"] = f"train-{ordinal}-"
    meta["labels"] = {**meta.get("labels", {}), "batch.kubernetes.io/job-name": "train"}
    meta["ownerReferences"] = [{"apiVersion": "batch/v1", "kind": "Job", "name": "train"}]
    spec = pod["spec"]
    mount = {"name": "kube-api-access-x7k2p", "readOnly": True, "mountPath": "/var/run/sa"}
    for key in ("initContainers", "containers"):
        for c in spec.get(key, []):
            c["volumeMounts"] = [*c.get("volumeMounts", []), mount]
    spec["volumes"] = [*spec.get("volumes", []), {"name": mount["name"], "projected": {}}]
    spec["serviceAccountName"] = "default"
    return {"apiVersion": "v1", "kind": "Pod", **pod}


def test_a_job_template_gets_exactly_the_patch_of_its_pod(shipped):
    obj = job()
    result = mutate_workload(obj, "ml-team", shipped, SETTINGS)
    alone = mutate(obj["spec"]["template"], "ml-team", shipped, SETTINGS)
    assert result.patch == [{**op, "path": "/spec/template" + op["path"]} for op in alone.patch]
    assert jsonpatch.apply_patch(obj, result.patch) == result.obj
    assert result.obj["spec"]["template"] == alone.pod
    assert result.policy == POLICY and result.templates == 1 and not result.denials
    assert_valid(result.obj)
    assert qos_class(pod_from(result.obj["spec"]["template"])) == "Guaranteed"


@pytest.mark.parametrize("on_job", [True, False], ids=["label-on-job", "label-on-template"])
def test_pods_of_a_mutated_job_pass_the_pod_webhook_with_an_empty_patch(shipped, on_job):
    obj = job(policy=POLICY, template_policy=None) if on_job else job()
    result = mutate_workload(obj, "ml-team", shipped, SETTINGS)
    mutated = result.obj["spec"]["template"]
    assert mutated["metadata"]["labels"][POLICY_LABEL] == POLICY  # the pods carry the label
    (prefetch,) = mutated["spec"]["initContainers"]
    assert prefetch["name"].startswith("topoplace-prefetch-imagenet-")
    pod = pod_from(mutated)
    again = mutate(pod, "ml-team", shipped, SETTINGS)
    assert again.patch == [] and again.policy == POLICY
    assert APPLIED_ANNOTATION in pod["metadata"]["annotations"]


def test_the_workload_label_is_copied_only_into_templates_it_mutates(shipped):
    obj = job(policy="nope", template_policy=None)
    result = mutate_workload(obj, "ml-team", shipped, SETTINGS)
    assert result.patch == [] and result.obj is obj
    assert any("'nope' does not exist" in w for w in result.warnings)


def test_a_missing_policy_follows_the_on_missing_policy_setting(shipped):
    obj = job(policy="nope", template_policy=None)
    deny = replace(SETTINGS, on_missing_policy="deny")
    result = mutate_workload(obj, "ml-team", shipped, deny)
    assert result.patch == [] and len(result.denials) == 1
    assert "spec.template: placement policy 'nope' does not exist" in result.denials[0]


def test_every_template_of_a_jobset_is_mutated_at_its_own_path(shipped):
    obj = jobset(4)
    result = mutate_workload(obj, "ml-team", shipped, SETTINGS)
    assert result.templates == 4
    prefixes = {"/".join(op["path"].split("/")[:7]) for op in result.patch}
    assert prefixes == {f"/spec/replicatedJobs/{i}/template/spec/template" for i in range(4)}
    assert jsonpatch.apply_patch(obj, result.patch) == result.obj
    for found in pod_templates(result.obj):
        assert mutate(pod_from(found.pod), "ml-team", shipped, SETTINGS).patch == []
    assert mutate_workload(result.obj, "ml-team", shipped, SETTINGS).patch == []  # idempotent


def test_leaderworkerset_and_pytorchjob_templates_follow_the_workload_label(shipped):
    lws = {
        "apiVersion": "leaderworkerset.x-k8s.io/v1",
        "kind": "LeaderWorkerSet",
        "metadata": {"name": "serve", "labels": {POLICY_LABEL: POLICY}},
        "spec": {
            "leaderWorkerTemplate": {
                "size": 2,
                "leaderTemplate": template(policy=None),
                "workerTemplate": template(policy=None),
            }
        },
    }
    pytorch = {
        "apiVersion": "kubeflow.org/v1",
        "kind": "PyTorchJob",
        "metadata": {"name": "ddp", "labels": {POLICY_LABEL: POLICY}},
        "spec": {
            "pytorchReplicaSpecs": {
                "Master": {"replicas": 1, "template": template(policy=None)},
                "Worker": {"replicas": 3, "template": template(policy=None)},
            }
        },
    }
    for obj in (lws, pytorch):
        result = mutate_workload(obj, "ml-team", shipped, SETTINGS)
        assert result.templates == 2
        assert all("cpu 500m rounded up to 1" in w for w in result.warnings)
        for found in pod_templates(result.obj):
            assert found.pod["metadata"]["labels"][POLICY_LABEL] == POLICY
            assert qos_class(pod_from(found.pod)) == "Guaranteed"


def test_a_deployment_does_not_pass_its_label_on(shipped):
    deployment = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "web", "labels": {POLICY_LABEL: POLICY}},
        "spec": {"template": template(policy=None)},
    }
    result = mutate_workload(deployment, "ml-team", shipped, SETTINGS)
    assert result.templates == 0 and result.patch == []


def test_an_unreadable_template_is_left_unchanged_with_a_warning(shipped):
    obj = jobset(2)
    broken = obj["spec"]["replicatedJobs"][1]["template"]["spec"]["template"]
    broken["spec"]["containers"].append("sidecar")  # not an object
    result = mutate_workload(obj, "ml-team", shipped, SETTINGS, label="JobSet/llm")
    assert result.unread == ["JobSet/llm spec.replicatedJobs[1].template.spec.template"]
    assert any("cannot read the pod template" in w for w in result.warnings)
    assert result.obj["spec"]["replicatedJobs"][1] is obj["spec"]["replicatedJobs"][1]
    assert result.templates == 1 and result.patch  # the readable one is still mutated
    with pytest.raises(InvalidPod, match=r"replicatedJobs\[1\]"):
        mutate_workload(obj, "ml-team", shipped, SETTINGS, strict=True)


def test_a_policy_label_that_is_not_a_string_is_unreadable(shipped):
    obj = job()
    obj["spec"]["template"]["metadata"]["labels"][POLICY_LABEL] = 7
    result = mutate_workload(obj, "ml-team", shipped, SETTINGS)
    assert result.patch == [] and result.unread == ["spec.template"]
