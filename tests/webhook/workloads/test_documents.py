"""The offline mutate pipeline in-process: every shipped example, workloads, odd input."""

from __future__ import annotations

from typing import Any

import jsonpatch
import pytest

from tests.conftest import REPO_ROOT as REPO
from tests.kube import assert_valid, qos_class
from tests.webhook.builders import SETTINGS, policy_doc
from webhook.policy.loader import load_policy_dir
from webhook.vocabulary import APPLIED_ANNOTATION
from webhook.workloads.documents import DocumentError, mutate_documents
from webhook.workloads.templates import pod_templates
from webhook.yaml_io import YamlInputError, load_documents

EXAMPLES = sorted((REPO / "examples" / "pods").glob("*.yaml"))


def as_pod(template: dict[str, Any]) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod", **template}


@pytest.fixture(scope="module")
def shipped():
    return load_policy_dir(REPO / "policies")


@pytest.mark.parametrize("example", EXAMPLES, ids=lambda p: p.name)
def test_shipped_examples_become_valid_guaranteed_pods(shipped, example):
    docs = load_documents(example.read_text(), source=str(example))
    (result,) = mutate_documents(docs, policies=shipped, settings=SETTINGS, namespace="ml-team")
    assert not result.denials
    assert jsonpatch.apply_patch(result.before, result.patch) == result.after
    templates = pod_templates(result.after)
    assert templates
    for template in templates:
        pod = as_pod(template.pod) if template.path else template.pod
        assert APPLIED_ANNOTATION in pod["metadata"]["annotations"]
        assert_valid(pod)
        assert qos_class(pod) == "Guaranteed"
    if result.after["apiVersion"] in ("apps/v1", "batch/v1"):  # built-in workloads stay valid
        assert_valid(result.after)


def test_every_replica_template_of_a_pytorchjob_is_mutated(shipped):
    path = REPO / "examples" / "pods" / "pytorchjob.yaml"
    docs = load_documents(path.read_text(), source=str(path))
    (result,) = mutate_documents(docs, policies=shipped, settings=SETTINGS, namespace="ml-team")
    specs = result.after["spec"]["pytorchReplicaSpecs"]
    for role in ("Master", "Worker"):
        command = specs[role]["template"]["spec"]["containers"][0]["command"]
        assert command[:4] == ["python", "-m", "torch.distributed.run", "--numa-binding=exclusive"]


def test_object_namespace_beats_the_default(tmp_path):
    (tmp_path / "p.yaml").write_text(
        "apiVersion: topoplace.io/v1alpha1\nkind: PlacementPolicy\nmetadata: {name: p}\n"
        "spec: {namespaces: [ml-*], onMissing: deny}\n"
    )
    policies = load_policy_dir(tmp_path)
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "x", "namespace": "web", "labels": {"topoplace.io/policy": "p"}},
        "spec": {"containers": [{"name": "c", "image": "i"}]},
    }
    (result,) = mutate_documents([pod], policies=policies, settings=SETTINGS, namespace="ml-a")
    assert result.denials and "'web'" in result.denials[0]


def test_label_on_a_deployment_but_not_on_its_template_is_pointed_out(policies):
    template = {"spec": {"containers": [{"name": "c"}]}}
    deployment = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "d", "labels": {"topoplace.io/policy": "p"}},
        "spec": {"selector": {"matchLabels": {"a": "b"}}, "template": template},
    }
    policy_set = policies(policy_doc("p"))
    (result,) = mutate_documents(
        [deployment], policies=policy_set, settings=SETTINGS, namespace="d"
    )
    assert result.patch == [] and result.after is deployment
    assert any("not on its pod template" in w for w in result.warnings)


def test_label_on_a_job_is_enough_as_the_webhook_mutates_the_job(policies):
    job = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": "j", "labels": {"topoplace.io/policy": "p"}},
        "spec": {"template": {"spec": {"restartPolicy": "Never", "containers": [{"name": "c"}]}}},
    }
    policy_set = policies(policy_doc("p", resources={"guaranteed": True}))
    (result,) = mutate_documents([job], policies=policy_set, settings=SETTINGS, namespace="d")
    template = result.after["spec"]["template"]
    assert template["metadata"]["labels"] == {"topoplace.io/policy": "p"}
    assert qos_class(as_pod(template)) == "Guaranteed"
    assert not any("not on its pod template" in w for w in result.warnings)


def test_object_without_template_is_left_with_a_warning(policies):
    cm = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}}
    (result,) = mutate_documents([cm], policies=policies(policy_doc("p")), settings=SETTINGS,
                                 namespace="d")  # fmt: skip
    assert result.after == cm and "no pod template" in result.warnings[0]


def test_non_object_document_is_an_error(policies):
    with pytest.raises(DocumentError, match="document 2"):
        mutate_documents(
            [{"kind": "Pod", "spec": {"containers": []}}, ["x"]],
            policies=policies(policy_doc("p")),
            settings=SETTINGS,
            namespace="d",
        )


def test_broken_input_yaml_names_line():
    with pytest.raises(YamlInputError, match=r"pods.yaml: line 2 column \d+: invalid YAML"):
        load_documents("kind: Pod\n  bad: [\n", source="pods.yaml")
