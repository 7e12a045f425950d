"""Two bare webhooks as the floor of our path: the API server reaches them as it reaches
ours, through a ClusterIP Service, the stand-in for kube-proxy and two Ready pods that the
e2e runtime runs for real, and each answers every pod with our patch, fixed.

- bare-aiohttp: benchmarks/peers/bare_server.py --patch-file, our image's Python and aiohttp,
  parsing the review with orjson (floor.respond);
- bare-go: e2e/go/barewebhook, net/http and encoding/json (built by
  e2e/build-bare-webhook.sh into the e2e cache, mounted into its pods as a hostPath).

Their MutatingWebhookConfigurations are ours in every setting but the name, the Service
and the objectSelector (their own `PEER_LABEL` value). Everything goes at exit.
"""

from __future__ import annotations

import base64
import contextlib
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from benchmarks.peers.map_policy import PEER_LABEL
from webhook import jsonio
from webhook.certs.keys import make_ca, make_serving_cert
from webhook.engine.outcome import DEFAULT_PREFETCH_IMAGE

__all__ = ["BARE_PEERS", "NAMESPACE", "bare_objects", "go_binary", "running_bare"]

_REPO = Path(__file__).resolve().parents[2]
NAMESPACE = "topoplace-bench-bare"
BARE_PEERS = ("bare-aiohttp", "bare-go")
_PORT = 8443
_REPLICAS = 2  # as our Deployment: the stand-in for kube-proxy turns between two pods


def go_binary() -> tuple[Path | None, str]:
    """(the bare Go webhook, "") or (None, why not)."""
    try:
        out = subprocess.run(
            ["bash", str(_REPO / "e2e" / "build-bare-webhook.sh")],
            capture_output=True,
            text=True,
            check=True,
        )
    except (OSError, subprocess.CalledProcessError) as exc:
        why = getattr(exc, "stderr", None) or str(exc)
        return None, f"e2e/build-bare-webhook.sh failed: {why.strip()[-500:]}"
    return Path(out.stdout.strip()), ""


def _command(peer: str, go: Path | None) -> list[str]:
    flags = [
        "--tls-cert=/tls/tls.crt",
        "--tls-key=/tls/tls.key",
        # The e2e runtime's pods share the host's network: each binds its own pod IP, as
        # ours does (e2e/overlays/pod-network), or two replicas would collide.
        "--host=$(POD_IP)",
        f"--port={_PORT}",
        "--patch-file=/tls/patch.json",
    ]
    if peer == "bare-go":
        assert go is not None
        return [str(go), *flags]
    return ["python", "-m", "benchmarks.peers.bare_server", *flags]


def _deployment(peer: str, go: Path | None) -> dict[str, Any]:
    labels = {"app.kubernetes.io/name": peer}
    mounts = [{"name": "tls", "mountPath": "/tls", "readOnly": True}]
    volumes: list[dict[str, Any]] = [{"name": "tls", "secret": {"secretName": peer}}]
    if go is not None and peer == "bare-go":
        mounts.append({"name": "bin", "mountPath": str(go.parent), "readOnly": True})
        volumes.append({"name": "bin", "hostPath": {"path": str(go.parent)}})
    probe = {"httpGet": {"path": "/healthz", "port": "https", "scheme": "HTTPS"}}
    container = {
        "name": "serve",
        "image": DEFAULT_PREFETCH_IMAGE,  # our image: the e2e runtime runs it for real
        "command": _command(peer, go),
        "env": [
            {"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
            {"name": "PYTHONPATH", "value": str(_REPO)},
        ],
        "ports": [{"name": "https", "containerPort": _PORT}],
        "readinessProbe": {**probe, "periodSeconds": 1},
        "volumeMounts": mounts,
    }
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": peer, "namespace": NAMESPACE},
        "spec": {
            "replicas": _REPLICAS,
            "selector": {"matchLabels": labels},
            "template": {
                "metadata": {"labels": labels},
                "spec": {
                    "enableServiceLinks": False,
                    "automountServiceAccountToken": False,
                    "containers": [container],
                    "volumes": volumes,
                },
            },
        },
    }


def _webhook(peer: str, ca_pem: bytes) -> dict[str, Any]:
    """Ours (manifests/base/webhook/mutatingwebhookconfiguration.yaml), for `peer`'s pods."""
    return {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "MutatingWebhookConfiguration",
        "metadata": {"name": f"topoplace-bench-{peer}"},
        "webhooks": [
            {
                "name": f"{peer}.bench.topoplace.io",
                "clientConfig": {
                    "service": {
                        "name": peer,
                        "namespace": NAMESPACE,
                        "path": "/mutate",
                        "port": 443,
                    },
                    "caBundle": base64.b64encode(ca_pem).decode("ascii"),
                },
                "rules": [
                    {
                        "operations": ["CREATE"],
                        "apiGroups": [""],
                        "apiVersions": ["v1"],
                        "resources": ["pods"],
                        "scope": "Namespaced",
                    }
                ],
                "objectSelector": {"matchLabels": {PEER_LABEL: peer}},
                "namespaceSelector": {
                    "matchExpressions": [
                        {
                            "key": "kubernetes.io/metadata.name",
                            "operator": "NotIn",
                            "values": ["kube-system", "topoplace-system", NAMESPACE],
                        }
                    ]
                },
                "matchPolicy": "Equivalent",
                "sideEffects": "None",
                "admissionReviewVersions": ["v1"],
                "reinvocationPolicy": "IfNeeded",
                "timeoutSeconds": 5,
                "failurePolicy": "Ignore",
            }
        ],
    }


def bare_objects(peer: str, patch: list[dict[str, Any]], go: Path | None) -> list[dict[str, Any]]:
    """Secret (serving pair for the Service's names, the patch), Deployment, Service, and
    the MutatingWebhookConfiguration that calls it, for one bare peer."""
    ca = make_ca(f"{peer}-ca")
    names = [peer, f"{peer}.{NAMESPACE}", f"{peer}.{NAMESPACE}.svc"]
    pair = make_serving_cert(ca, names)
    files = {"tls.crt": pair.cert_pem, "tls.key": pair.key_pem, "patch.json": jsonio.dumps(patch)}
    secret = {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": peer, "namespace": NAMESPACE},
        "type": "Opaque",
        "data": {k: base64.b64encode(v).decode("ascii") for k, v in files.items()},
    }
    service = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": peer, "namespace": NAMESPACE},
        "spec": {
            "type": "ClusterIP",
            "selector": {"app.kubernetes.io/name": peer},
            "ports": [{"name": "https", "port": 443, "targetPort": "https", "protocol": "TCP"}],
        },
    }
    return [secret, _deployment(peer, go), service, _webhook(peer, ca.cert_pem)]


@contextlib.contextmanager
def running_bare(
    kubectl: Any, patch: list[dict[str, Any]], notes: list[str]
) -> Iterator[list[str]]:
    """The bare peers whose pods became Ready (a missing one is said in `notes`)."""
    go, why = go_binary()
    peers = [p for p in BARE_PEERS if p != "bare-go" or go is not None]
    if go is None:
        notes.append(f"bare Go webhook: no row. {why}")
    kubectl.run("create", "namespace", NAMESPACE, check=False)
    try:
        kubectl.apply([obj for peer in peers for obj in bare_objects(peer, patch, go)])
        ready = []
        for peer in peers:
            rollout = kubectl.run(
                "rollout",
                "status",
                f"deployment/{peer}",
                "-n",
                NAMESPACE,
                "--timeout=180s",
                check=False,
            )
            if rollout.returncode == 0:
                ready.append(peer)
            else:
                notes.append(f"{peer}: no row; its pods did not become Ready: {rollout.stderr}")
        yield ready
    finally:
        for peer in peers:
            kubectl.run(
                "delete", "mutatingwebhookconfiguration", f"topoplace-bench-{peer}", check=False
            )
        kubectl.run("delete", "namespace", NAMESPACE, "--wait=false", check=False)
