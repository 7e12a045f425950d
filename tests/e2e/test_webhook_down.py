"""While no webhook answers: fail-open (the base) admits opted-in pods unmutated within the
timeout; fail-closed refuses them saying why; once the webhook is back, mutation resumes."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from e2e import procs
from e2e.cluster import Cluster
from e2e.kube import Kubectl
from e2e.topoplace.install import wait_webhook_ready
from tests.e2e.helpers import REPO
from webhook.vocabulary import APPLIED_ANNOTATION

OVERLAYS = REPO / "e2e" / "overlays"


def opted_in(name: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": {"topoplace.io/policy": "single-numa-partial"}},
        "spec": {
            "containers": [
                {
                    "name": "trainer",
                    "image": "nvcr.io/nvidia/pytorch:25.01-py3",
                    "resources": {"limits": {"nvidia.com/gpu": 2}},
                }
            ]
        },
    }


def scale_webhook(kubectl: Kubectl, replicas: int) -> None:
    kubectl(
        "scale", "deployment/topoplace-webhook", "-n", "topoplace-system", f"--replicas={replicas}"
    )
    if replicas == 0:
        selector = "app.kubernetes.io/name=topoplace-webhook"
        procs.wait_for(  # gone, not only terminating: a terminating one still serves
            lambda: (
                not kubectl.json("get", "pods", "-n", "topoplace-system", "-l", selector)["items"]
            ),
            "every webhook pod stopped and gone",
        )
    else:
        wait_webhook_ready(kubectl, replicas)


@pytest.fixture
def webhook_down(cluster: Cluster, kubectl: Kubectl) -> Iterator[None]:
    scale_webhook(kubectl, 0)
    yield
    kubectl("apply", "-k", str(OVERLAYS / "base"))  # back to fail-open, and to 2 replicas
    wait_webhook_ready(kubectl, 2)


def timeout_seconds(kubectl: Kubectl) -> int:
    config = kubectl.json("get", "mutatingwebhookconfiguration", "topoplace-webhook")
    return int(config["webhooks"][0]["timeoutSeconds"])


def test_fail_open_admits_unmutated_then_fail_closed_refuses_then_mutation_resumes(
    cluster: Cluster,
    kubectl: Kubectl,
    namespace: str,
    create: Callable[..., Any],
    webhook_down: None,
) -> None:
    started = time.monotonic()
    stored = json.loads(create(opted_in("while-down"), namespace).stdout)
    assert time.monotonic() - started < timeout_seconds(kubectl) + 2
    assert APPLIED_ANNOTATION not in stored["metadata"].get("annotations", {})

    kubectl("apply", "-k", str(OVERLAYS / "fail-closed"))
    refused = create(opted_in("refused"), namespace, check=False)
    assert refused.returncode != 0
    assert "pods.topoplace.io" in refused.stderr, refused.stderr  # names our webhook
    assert "failed calling webhook" in refused.stderr, refused.stderr
    # Pods that do not opt in are never affected, even fail-closed.
    plain = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "plain"},
        "spec": {"containers": [{"name": "c", "image": "busybox:1.36"}]},
    }
    create(plain, namespace)

    scale_webhook(kubectl, 2)
    back = json.loads(create(opted_in("after"), namespace).stdout)
    assert APPLIED_ANNOTATION in back["metadata"]["annotations"]
