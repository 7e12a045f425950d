"""What the webhook refuses or leaves alone, as the real API server returns it to kubectl: a
namespace a `deny` policy does not allow is refused with the reason, a policy that does not
exist is admitted unchanged with a warning (`serve --on-missing-policy warn`, the default),
and pods that do not opt in are never touched."""

from __future__ import annotations

import json
import secrets
from collections.abc import Iterator
from typing import Any

import pytest

from e2e import procs
from e2e.kube import Kubectl
from webhook.vocabulary import APPLIED_ANNOTATION


@pytest.fixture
def outside_namespace(kubectl: Kubectl) -> Iterator[str]:
    """A namespace no example policy's `ml-*` allowlist matches."""
    name = f"research-e2e-{secrets.token_hex(3)}"
    kubectl("create", "namespace", name)
    procs.wait_for(
        lambda: kubectl.run("get", "sa", "default", "-n", name, check=False).returncode == 0,
        f"serviceaccount default in {name}",
    )
    yield name
    kubectl.run("delete", "pods", "--all", "-n", name, "--grace-period=0", "--force", check=False)
    kubectl.run("delete", "namespace", name, "--wait=false", check=False)


def pod(name: str, policy: str | None) -> dict[str, Any]:
    labels = {"topoplace.io/policy": policy} if policy else {}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": labels},
        "spec": {
            "containers": [
                {
                    "name": "trainer",
                    "image": "nvcr.io/nvidia/pytorch:25.01-py3",
                    "resources": {"limits": {"nvidia.com/gpu": 8}},
                }
            ]
        },
    }


def create(kubectl: Kubectl, namespace: str, obj: dict[str, Any]) -> Any:
    return kubectl.run(
        "create", "-n", namespace, "-f", "-", "-o", "json", input=json.dumps(obj), check=False
    )


def test_a_deny_policy_refuses_a_namespace_it_does_not_allow(
    kubectl: Kubectl, outside_namespace: str
) -> None:
    done = create(
        kubectl, outside_namespace, pod("refused", "ddp-hgx-full-node")
    )  # onMissing: deny
    assert done.returncode != 0
    assert "may not use placement policy 'ddp-hgx-full-node'" in done.stderr, done.stderr
    assert "spec.namespaces" in done.stderr  # says what to do about it


def test_a_missing_policy_is_admitted_unchanged_with_a_warning(
    kubectl: Kubectl, namespace: str
) -> None:
    done = create(kubectl, namespace, pod("typo", "ddp-hgx-ful-node"))
    assert done.returncode == 0, done.stderr
    assert "placement policy 'ddp-hgx-ful-node' does not exist" in done.stderr, done.stderr
    assert APPLIED_ANNOTATION not in json.loads(done.stdout)["metadata"].get("annotations", {})


def test_a_pod_that_does_not_opt_in_is_stored_as_sent(kubectl: Kubectl, namespace: str) -> None:
    done = create(kubectl, namespace, pod("plain", None))
    assert done.returncode == 0 and not done.stderr.strip(), done.stderr
    stored = json.loads(done.stdout)
    assert "affinity" not in stored["spec"]
    assert stored["spec"]["containers"][0]["resources"] == {
        "limits": {"nvidia.com/gpu": "8"},
        "requests": {"nvidia.com/gpu": "8"},
    }  # the API server's own defaulting (requests from limits), nothing of ours
