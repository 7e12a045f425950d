"""Pods created by a user, by the Job controller and by the Deployment controller: the real
API server calls the webhook for each, validates what it returns, and stores what
`topoplace-webhook mutate` predicts."""

from __future__ import annotations

import copy
import json
import subprocess
from collections.abc import Callable
from typing import Any

import yaml

from e2e.kube import Kubectl
from tests.e2e.helpers import REPO, WEBHOOK, assert_subset, predict, template_spec, wait_pods
from webhook.vocabulary import APPLIED_ANNOTATION

POLICIES = REPO / "policies"


def example(name: str) -> dict[str, Any]:
    return yaml.safe_load((REPO / "examples" / "pods" / name).read_text())


def indexed_job() -> dict[str, Any]:
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": "sweep"},
        "spec": {
            "completionMode": "Indexed",
            "completions": 2,
            "parallelism": 2,
            "template": {
                "metadata": {"labels": {"topoplace.io/policy": "single-numa-partial"}},
                "spec": {
                    "restartPolicy": "Never",
                    "containers": [
                        {
                            "name": "trainer",
                            "image": "nvcr.io/nvidia/pytorch:25.01-py3",
                            "command": ["torchrun", "--nproc-per-node=2", "sweep.py"],
                            "resources": {"limits": {"nvidia.com/gpu": 2}},
                        }
                    ],
                },
            },
        },
    }


def assert_stored_as_predicted(
    kubectl: Kubectl, stored: dict[str, Any], source: dict[str, Any], namespace: str
) -> None:
    (predicted,) = predict(kubectl, source, namespace, POLICIES)
    expected = template_spec(predicted)
    assert_subset(expected, stored["spec"], "spec")
    metadata = (
        predicted["metadata"]
        if predicted["kind"] == "Pod"
        else (predicted["spec"]["template"]["metadata"])
    )
    applied = metadata["annotations"][APPLIED_ANNOTATION]
    assert stored["metadata"]["annotations"][APPLIED_ANNOTATION] == applied
    # The stored pod, API-server defaults and all, is already in its mutated state.
    done = subprocess.run(
        [
            WEBHOOK,
            "mutate",
            f"--policies={POLICIES}",
            f"--namespace={namespace}",
            "--output=patch",
            "-",
        ],
        input=json.dumps(stored),
        capture_output=True,
        text=True,
        check=True,
    )
    assert json.loads(done.stdout) == [], done.stdout


def test_a_users_pod_is_stored_as_predicted(
    kubectl: Kubectl, namespace: str, create: Callable[..., Any]
) -> None:
    pod = example("multi-container-pod.yaml")
    done = create(pod, namespace)
    stored = json.loads(done.stdout)
    assert_stored_as_predicted(kubectl, stored, pod, namespace)
    assert stored["status"]["qosClass"] == "Guaranteed"  # computed by the API server


def test_an_indexed_jobs_pods_are_stored_as_predicted(
    kubectl: Kubectl, namespace: str, create: Callable[..., Any]
) -> None:
    job = indexed_job()
    create(job, namespace)
    for pod in wait_pods(kubectl, namespace, "job-name=sweep", 2):
        assert_stored_as_predicted(kubectl, pod, job, namespace)
        assert pod["status"]["qosClass"] == "Guaranteed"


def test_a_deployments_pods_are_stored_as_predicted(
    kubectl: Kubectl, namespace: str, create: Callable[..., Any]
) -> None:
    deployment = example("inference-deployment.yaml")
    create(deployment, namespace)
    replicas = deployment["spec"].get("replicas", 1)
    selector = ",".join(
        f"{k}={v}" for k, v in deployment["spec"]["selector"]["matchLabels"].items()
    )
    for pod in wait_pods(kubectl, namespace, selector, replicas):
        assert_stored_as_predicted(kubectl, pod, deployment, namespace)


def test_a_dry_run_create_is_mutated_and_leaves_nothing(
    kubectl: Kubectl, namespace: str, create: Callable[..., Any]
) -> None:
    pod = copy.deepcopy(example("multi-container-pod.yaml"))
    done = create(pod, namespace, "--dry-run=server")
    returned = json.loads(done.stdout)
    assert APPLIED_ANNOTATION in returned["metadata"]["annotations"]
    assert_stored_as_predicted(kubectl, returned, pod, namespace)
    assert kubectl.json("get", "pods", "-n", namespace)["items"] == []
