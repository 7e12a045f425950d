"""A second mutating webhook, a sidecar injector as service meshes have, registered beside
ours: after the API server reinvokes us (reinvocationPolicy: IfNeeded), the stored pod is
still Guaranteed, the injected container included."""

from __future__ import annotations

import base64
import json
import ssl
import threading
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
import trustme

from e2e.kube import Kubectl
from webhook.vocabulary import APPLIED_ANNOTATION

SIDECAR = {"name": "mesh-proxy", "image": "envoyproxy/envoy:v1.31.0", "args": ["--proxy"]}


class _Injector(BaseHTTPRequestHandler):
    """Adds SIDECAR to every pod, once, and nothing else (as an injector does)."""

    def do_POST(self) -> None:
        review = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        pod = review["request"]["object"]
        names = {c["name"] for c in pod["spec"]["containers"]}
        patch = (
            []
            if SIDECAR["name"] in names
            else [{"op": "add", "path": "/spec/containers/-", "value": SIDECAR}]
        )
        response: dict[str, Any] = {"uid": review["request"]["uid"], "allowed": True}
        if patch:
            response["patchType"] = "JSONPatch"
            response["patch"] = base64.b64encode(json.dumps(patch).encode()).decode()
        body = json.dumps(
            {**{k: review[k] for k in ("apiVersion", "kind")}, "response": response}
        ).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def sidecar_injector(kubectl: Kubectl, namespace: str) -> Iterator[str]:
    ca = trustme.CA()
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Injector)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ca.issue_cert("127.0.0.1").configure_cert(context)
    server.socket = context.wrap_socket(server.socket, server_side=True)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    name = "zz-sidecar-injector"  # sorts after topoplace-webhook: called after us
    kubectl.apply(
        {
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "MutatingWebhookConfiguration",
            "metadata": {"name": name},
            "webhooks": [
                {
                    "name": "inject.mesh.example.com",
                    "clientConfig": {
                        "url": f"https://127.0.0.1:{server.server_address[1]}/inject",
                        "caBundle": base64.b64encode(ca.cert_pem.bytes()).decode(),
                    },
                    "rules": [
                        {
                            "operations": ["CREATE"],
                            "apiGroups": [""],
                            "apiVersions": ["v1"],
                            "resources": ["pods"],
                        }
                    ],
                    "namespaceSelector": {
                        "matchLabels": {"kubernetes.io/metadata.name": namespace}
                    },
                    "sideEffects": "None",
                    "admissionReviewVersions": ["v1"],
                    "failurePolicy": "Fail",
                    "reinvocationPolicy": "Never",
                }
            ],
        }
    )
    yield name
    kubectl("delete", "mutatingwebhookconfiguration", name)
    server.shutdown()
    server.server_close()


def test_an_injected_sidecar_is_made_guaranteed_on_reinvocation(
    kubectl: Kubectl, namespace: str, create: Callable[..., Any], sidecar_injector: str
) -> None:
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "meshed", "labels": {"topoplace.io/policy": "single-numa-partial"}},
        "spec": {
            "containers": [
                {
                    "name": "trainer",
                    "image": "nvcr.io/nvidia/pytorch:25.01-py3",
                    "command": ["torchrun", "--nproc-per-node=2", "train.py"],
                    "resources": {"limits": {"nvidia.com/gpu": 2}},
                }
            ]
        },
    }
    stored = json.loads(create(pod, namespace).stdout)
    containers = {c["name"]: c for c in stored["spec"]["containers"]}
    assert set(containers) == {"trainer", "mesh-proxy"}, "the injector ran"
    assert APPLIED_ANNOTATION in stored["metadata"]["annotations"]
    sidecar = containers["mesh-proxy"]["resources"]
    assert sidecar["requests"] == sidecar["limits"], sidecar
    assert {"cpu", "memory"} <= sidecar["limits"].keys()
    assert stored["status"]["qosClass"] == "Guaranteed"  # as the API server computes it
