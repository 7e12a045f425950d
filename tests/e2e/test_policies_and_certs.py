"""Day-2 operations through the real API server: a policy edited in the ConfigMap is used by
the next admissions, a broken edit keeps the last good set (and a metric says so), and
rotating the serving certificate keeps admissions working."""

from __future__ import annotations

import base64
import json
import re
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from e2e import procs
from e2e.cluster import Cluster
from e2e.kube import Kubectl, get_url
from tests.e2e.helpers import patch_policies
from webhook.certs.keys import KeyPair, make_serving_cert
from webhook.vocabulary import APPLIED_ANNOTATION

KEY = "single-numa-partial.yaml"
METRICS = "http://127.0.0.1:9102/metrics"  # `serve --metrics-port=9102`, as in the Deployment


def probe(name: str = "probe") -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "generateName": f"{name}-",
            "labels": {"topoplace.io/policy": "single-numa-partial"},
        },
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


def admitted(create: Callable[..., Any], namespace: str) -> dict[str, Any]:
    """What a dry-run create stores: the webhook's answer, leaving nothing behind."""
    return json.loads(create(probe(), namespace, "--dry-run=server").stdout)


def worker_env(pod: dict[str, Any]) -> dict[str, str]:
    return {e["name"]: e.get("value", "") for e in pod["spec"]["containers"][0].get("env", [])}


def metric(name: str, labels: str = "") -> float:
    pattern = re.compile(rf"^{re.escape(name)}{re.escape(labels)} (\S+)$", re.M)
    found = pattern.search(get_url(METRICS))
    return float(found.group(1)) if found else 0.0


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

    errors = metric("topoplace_webhook_policy_reload_errors_total")
    broken = edited["data"][KEY].replace("cpuPerGpu: 12", "cpuPerGpu: lots")
    assert broken != edited["data"][KEY]
    patch_policies(kubectl, {KEY: broken})
    procs.wait_for(
        lambda: metric("topoplace_webhook_policy_reload_errors_total") > errors,
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
    crt = Path(cluster.state / "webhook" / "tls" / "tls.crt")
    old = crt.read_bytes()
    reloads = metric("topoplace_webhook_tls_reloads_total", '{result="ok"}')
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
    cluster.restart("webhook-certs")  # its next pass, without waiting --check-interval
    outcomes = []
    # Admissions keep flowing during the rotation, bounded in time: `serve` checks its key
    # pair every --tls-reload-interval (10 s by default).
    deadline = time.monotonic() + 60
    while True:
        outcomes.append(
            APPLIED_ANNOTATION in admitted(create, namespace)["metadata"].get("annotations", {})
        )
        if (
            crt.read_bytes() != old
            and metric("topoplace_webhook_tls_reloads_total", '{result="ok"}') > reloads
        ):
            break
        if time.monotonic() > deadline:
            pytest.fail("the serving certificate was not rotated and reloaded within 60 s")
    for _ in range(3):
        outcomes.append(
            APPLIED_ANNOTATION in admitted(create, namespace)["metadata"].get("annotations", {})
        )
    assert all(outcomes), f"{outcomes.count(False)} of {len(outcomes)} admissions not mutated"
    secret = kubectl.json("get", "secret", "topoplace-webhook-tls", "-n", "topoplace-system")
    assert base64.b64decode(secret["data"]["tls.crt"]) not in (expiring.cert_pem, old)
