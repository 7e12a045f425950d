"""Every kustomization renders with `kubectl kustomize` and every object it produces is valid
against the Kubernetes OpenAPI schema, strictly (unknown fields are errors)."""

from __future__ import annotations

from collections import Counter

import pytest

from tests.kube import assert_valid
from tests.manifests.rendered import CHART_TARGETS, OVERLAYS, render

# Kinds from CRDs have no schema in kubernetes-validate; they are checked field by field in
# test_overlays.py instead.
_CRD_GROUPS = ("cert-manager.io/",)

BASE_KINDS = {
    "Namespace": 1,
    "ServiceAccount": 3,  # agent, webhook, claim-templates
    "ClusterRole": 7,  # + the webhook's node, template, NodeResourceTopology caches, spans
    "ClusterRoleBinding": 7,
    "Role": 2,  # + the webhook's scheduler Lease reads, in kube-system
    "RoleBinding": 2,
    "ConfigMap": 1,
    "DaemonSet": 1,
    "Deployment": 2,  # webhook, claim-templates
    "Service": 1,
    "PodDisruptionBudget": 1,
    "MutatingWebhookConfiguration": 1,
    "ValidatingAdmissionPolicy": 2,  # the agent's Node writes, its NodeResourceTopology
    "ValidatingAdmissionPolicyBinding": 2,
    "CustomResourceDefinition": 1,  # components/noderesourcetopology-crd
}


@pytest.mark.parametrize("target", ["", *(f"overlays/{o}" for o in OVERLAYS), *CHART_TARGETS])
def test_every_object_is_schema_valid(target: str) -> None:
    skipped = []
    for obj in render(target).objects:
        if obj["apiVersion"].startswith(_CRD_GROUPS):
            skipped.append(obj["kind"])
            continue
        assert_valid(obj)  # against Kubernetes K8S_VERSION, strict
    expected = ["Certificate", "Certificate", "Issuer", "Issuer"]
    assert sorted(skipped) == (expected if target.endswith("/cert-manager") else [])


def test_base_installs_exactly_the_expected_objects() -> None:
    kinds = Counter(o["kind"] for o in render().objects)
    assert kinds == BASE_KINDS


def test_every_namespaced_object_lands_in_topoplace_system() -> None:
    cluster_scoped = {
        "Namespace",
        "ClusterRole",
        "ClusterRoleBinding",
        "MutatingWebhookConfiguration",
        "ValidatingAdmissionPolicy",
        "ValidatingAdmissionPolicyBinding",
        "CustomResourceDefinition",
    }
    # kube-scheduler keeps its leader-election Lease in kube-system: reading it is granted there.
    elsewhere = {("Role", "topoplace-webhook-scheduler-leases"): "kube-system"}
    elsewhere[("RoleBinding", "topoplace-webhook-scheduler-leases")] = "kube-system"
    for obj in render().objects:
        name = obj["metadata"]["name"]
        if obj["kind"] in cluster_scoped:
            assert "namespace" not in obj["metadata"], name
        else:
            expected = elsewhere.get((obj["kind"], name), "topoplace-system")
            assert obj["metadata"]["namespace"] == expected, name
    for binding in render().all("RoleBinding") + render().all("ClusterRoleBinding"):
        for subject in binding["subjects"]:
            assert subject["namespace"] == "topoplace-system"


def test_every_object_carries_the_part_of_label() -> None:
    for obj in render().objects:
        assert obj["metadata"]["labels"]["app.kubernetes.io/part-of"] == "topoplace"
