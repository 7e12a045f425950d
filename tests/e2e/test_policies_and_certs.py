"""Day-2 operations through the real API server: a policy edited in the ConfigMap is used by
the next admissions, a broken edit keeps the last good set (and a metric says so), and
rotating the serving certificate keeps admissions working."""

from __future__ import annotations

import base64
import json
import ssl
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from e2e import procs
from e2e.cluster import Cluster
from e2e.kube import Kubectl
from e2e.topoplace.containers import kill_container
from e2e.topoplace.install import pods_of
from tests.e2e.helpers import admitted, metric, patch_policies, webhook_ips
from webhook.certs.keys import KeyPair, make_serving_cert
from webhook.vocabulary import APPLIED_ANNOTATION

KEY = "single-numa-partial.yaml"


def worker_env(pod: dict[str, Any]) -> dict[str, str]:
    return {e["name"]: e.get("value", "") for e in pod["spec"]["containers"][0].get("env", [])}


def der(pem: bytes | str) -> bytes:
    return ssl.PEM_cert_to_DER_cert(pem.decode() if isinstance(pem, bytes) else pem)


def served_certificates(kubectl: Kubectl) -> dict[str, bytes]:
    """pod IP → the serving certificate that replica presents now (DER)."""
    return {ip: der(ssl.get_server_certificate((ip, 8443))) for ip in webhook_ips(kubectl)}


@pytest.fixture
def policies_configmap(kubectl: Kubectl) -> Iterator[dict[str, Any]]:
    original = kubectl.json("get", "configmap", "topoplace-policies", "-n", "topoplace-system")
    yield original
    patch_policies(kubectl, original["data"])


def test_policy_edits_reach_the_next_admission_and_a_broken_one_changes_nothing(
    kubectl: Kubectl,
    namespace: str,
    create: Callable[..., Any],
    policies_configmap: dict[str, Any],
) -> None:
    assert worker_env(admitted(create, namespace))["NCCL_NET_GDR_LEVEL"] == "PXB"
    edited = json.loads(json.dumps(policies_configmap))
    edited["data"][KEY] = edited["data"][KEY].replace(
        "NCCL_NET_GDR_LEVEL: PXB", "NCCL_NET_GDR_LEVEL: PIX"
    )
    for field in ("resourceVersion", "uid", "creationTimestamp", "managedFields"):
        edited["metadata"].pop(field, None)
    kubectl.apply(edited)  # `kubectl apply` of the ConfigMap, as an operator would
    procs.wait_for(
        lambda: worker_env(admitted(create, namespace))["NCCL_NET_GDR_LEVEL"] == "PIX",
        "admissions using the edited policy (ConfigMap → ..data swap → reload)",
        timeout=30,
        interval=0.5,
    )

    errors = metric(kubectl, "topoplace_webhook_policy_reload_errors_total")
    broken = edited["data"][KEY].replace("cpuPerGpu: 12", "cpuPerGpu: lots")
    assert broken != edited["data"][KEY]
    patch_policies(kubectl, {KEY: broken}, wait=False)  # refused: nothing new to serve
    procs.wait_for(
        lambda: metric(kubectl, "topoplace_webhook_policy_reload_errors_total") > errors,
        "topoplace_webhook_policy_reload_errors_total to count the broken edit",
        timeout=30,
        interval=0.5,
    )
    pod = admitted(create, namespace)
    assert worker_env(pod)["NCCL_NET_GDR_LEVEL"] == "PIX"  # the last good set still serves
    assert pod["spec"]["containers"][0]["resources"]["limits"]["cpu"] == "24"  # 12 per GPU


def test_rotating_the_serving_certificate_keeps_admissions_working(
    cluster: Cluster, kubectl: Kubectl, namespace: str, create: Callable[..., Any]
) -> None:
    old = set(served_certificates(kubectl).values())
    reloads = metric(kubectl, "topoplace_webhook_tls_reloads_total", '{result="ok"}')
    # A serving certificate one day from expiry, signed by the same CA: inside the sidecar's
    # --renew-before-days, so its next pass issues a new pair.
    secret = kubectl.json("get", "secret", "topoplace-webhook-tls", "-n", "topoplace-system")
    ca = KeyPair(*(base64.b64decode(secret["data"][k]) for k in ("ca.crt", "ca.key")))
    expiring = make_serving_cert(ca, ["topoplace-webhook.topoplace-system.svc"], days=1)
    data = {"tls.crt": expiring.cert_pem, "tls.key": expiring.key_pem}
    patch = {"data": {k: base64.b64encode(v).decode() for k, v in data.items()}}
    kubectl.run(
        "patch",
        "secret",
        "topoplace-webhook-tls",
        "-n",
        "topoplace-system",
        "--type=merge",
        "-p",
        json.dumps(patch),
    )
    # Crash one replica's certs sidecar: the kubelet restarts it (restartPolicy Always), and
    # its first pass renews the pair without waiting --check-interval. The other replica
    # serves its own, still valid, pair meanwhile.
    victim = pods_of(kubectl, "topoplace-webhook")[0]
    kill_container(kubectl, "topoplace-system", victim["metadata"]["name"], "certs")
    ip = victim["status"]["podIP"]
    outcomes = []
    # Admissions keep flowing during the rotation, bounded in time: the kubelet's restart,
    # then `serve` checks its key pair every --tls-reload-interval (10 s by default).
    deadline = time.monotonic() + 90
    while True:
        outcomes.append(
            APPLIED_ANNOTATION in admitted(create, namespace)["metadata"].get("annotations", {})
        )
        if (
            served_certificates(kubectl)[ip] not in old | {der(expiring.cert_pem)}
            and metric(kubectl, "topoplace_webhook_tls_reloads_total", '{result="ok"}') > reloads
        ):
            break
        if time.monotonic() > deadline:
            pytest.fail("the serving certificate was not rotated and reloaded within 90 s")
    for _ in range(3):
        outcomes.append(
            APPLIED_ANNOTATION in admitted(create, namespace)["metadata"].get("annotations", {})
        )
    assert all(outcomes), f"{outcomes.count(False)} of {len(outcomes)} admissions not mutated"
    secret = kubectl.json("get", "secret", "topoplace-webhook-tls", "-n", "topoplace-system")
    assert der(base64.b64decode(secret["data"]["tls.crt"])) not in old | {der(expiring.cert_pem)}
