"""Topoplace's own pods under the real kubelets: a crashed webhook replica is restarted by its
kubelet while the other keeps every admission mutated, and a container of our image whose
command does not exist fails with a reason `kubectl describe` shows."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from e2e import procs
from e2e.kube import Kubectl
from e2e.topoplace.containers import kill_container, restart_count
from e2e.topoplace.install import agent_pods, pods_of, wait_webhook_ready
from tests.e2e.helpers import admitted, phase
from webhook.engine.outcome import DEFAULT_PREFETCH_IMAGE as IMAGE
from webhook.vocabulary import APPLIED_ANNOTATION

NAMESPACE = "topoplace-system"


def test_a_killed_webhook_replica_is_restarted_while_the_other_mutates_every_pod(
    kubectl: Kubectl, namespace: str, create: Callable[..., Any]
) -> None:
    victim = pods_of(kubectl, "topoplace-webhook")[0]["metadata"]["name"]
    before = kill_container(kubectl, NAMESPACE, victim, "serve")
    mutated = []
    restarted = False
    while not restarted:  # admissions all the while the kubelet brings it back
        stored = admitted(create, namespace)
        mutated.append(APPLIED_ANNOTATION in stored["metadata"].get("annotations", {}))
        pod = kubectl.json("get", "pod", victim, "-n", NAMESPACE)
        restarted = restart_count(pod, "serve") == before + 1
        assert len(mutated) < 2000, "the kubelet did not restart the killed container"
    wait_webhook_ready(kubectl, 2)
    stored = admitted(create, namespace)
    mutated.append(APPLIED_ANNOTATION in stored["metadata"].get("annotations", {}))
    assert all(mutated), f"{mutated.count(False)} of {len(mutated)} admissions fell open"


def test_a_container_of_our_image_with_no_such_command_fails_saying_so(
    kubectl: Kubectl, namespace: str, create: Callable[..., Any]
) -> None:
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "typo"},
        "spec": {
            "restartPolicy": "Never",
            "nodeSelector": {"kubernetes.io/hostname": "cpu-vm"},
            "containers": [{"name": "agent", "image": IMAGE, "command": ["topoplace-agnet"]}],
        },
    }
    create(pod, namespace)
    failed = procs.wait_for(
        lambda: phase(kubectl, namespace, "typo", "Failed"),
        "the pod with a missing command to fail",
        timeout=60,
    )
    (status,) = failed["status"]["containerStatuses"]
    done = status["state"]["terminated"]
    assert done["reason"] == "StartError", done
    assert '"topoplace-agnet"' in done["message"] and "not found" in done["message"], done
    described = kubectl("describe", "pod", "typo", "-n", namespace)
    assert "topoplace-agnet" in described and "not found" in described
    # The node and the cluster go on: an opted-in pod is still mutated.
    stored = admitted(create, namespace)
    assert APPLIED_ANNOTATION in stored["metadata"].get("annotations", {})


def test_kubectl_logs_reads_a_container_log_through_its_kubelet(kubectl: Kubectl) -> None:
    # The runtime writes stdout/stderr in the CRI log format; the API server reaches the
    # kubelet at the Node's address (127.0.0.1) and the port the kubelet publishes.
    pod = agent_pods(kubectl)["dgx-h100-a"]["metadata"]["name"]
    out = kubectl("logs", "-n", NAMESPACE, pod, "-c", "agent")
    assert "keeping node labels in sync" in out
    assert "dgx-h100-a" in out
