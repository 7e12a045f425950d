"""Fixtures for the admission server: real TLS (trustme CA), real policy files, port 0.

Policies are written by the tests themselves so the expectations below do not move when the
example policies in policies/ are edited.
"""

from __future__ import annotations

import asyncio
import base64
import json
import os
import re
import ssl
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import trustme

from webhook.engine.outcome import EngineSettings
from webhook.server.app import ServerConfig
from webhook.server.runner import WebhookServer

# The documented AdmissionReview v1 Pod CREATE example (kubernetes.io admission docs).
REFERENCE_REVIEW = Path(__file__).with_name("data") / "admissionreview-pod-create.json"

POLICY_DDP = """\
apiVersion: topoplace.io/v1alpha1
kind: PlacementPolicy
metadata:
  name: ddp
spec:
  namespaces: ["ml-*", "foo"]
  placement:
    gpuNicLink: PXB
    gpuNicPairs: true
  resources:
    guaranteed: true
    cpuPerGpu: {cpu}
    memoryPerGpu: 16Gi
  launcher:
    numaBinding: node
  env:
    MARK: "{mark}"
"""

POLICY_PROD_ONLY = """\
apiVersion: topoplace.io/v1alpha1
kind: PlacementPolicy
metadata:
  name: prod-only
spec:
  namespaces: ["prod"]
  onMissing: deny
  resources:
    cpuPerGpu: 2
"""


def ddp_policy(*, cpu: int = 4, mark: str = "one") -> str:
    return POLICY_DDP.format(cpu=cpu, mark=mark)


@dataclass(frozen=True)
class TlsFiles:
    ca: trustme.CA
    cert: Path
    key: Path

    def client_context(self) -> ssl.SSLContext:
        ctx = ssl.create_default_context()
        self.ca.configure_trust(ctx)
        return ctx


def write_leaf(leaf: trustme.LeafCert, cert: Path, key: Path) -> None:
    """Key first, then cert, each replaced atomically, as a careful rotator would."""
    for path, data in ((key, leaf.private_key_pem.bytes()), (cert, _chain(leaf))):
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_bytes(data)
        os.replace(tmp, path)


def _chain(leaf: trustme.LeafCert) -> bytes:
    return b"".join(blob.bytes() for blob in leaf.cert_chain_pems)


@pytest.fixture
def tls_files(tmp_path: Path) -> TlsFiles:
    ca = trustme.CA()
    files = TlsFiles(ca, tmp_path / "tls.crt", tmp_path / "tls.key")
    write_leaf(ca.issue_cert("localhost", "127.0.0.1"), files.cert, files.key)
    return files


@pytest.fixture
def policy_dir(tmp_path: Path) -> Path:
    directory = tmp_path / "policies"
    directory.mkdir()
    (directory / "ddp.yaml").write_text(ddp_policy())
    (directory / "prod-only.yaml").write_text(POLICY_PROD_ONLY)
    return directory


def server_config(policy_dir: Path, tls: TlsFiles, **overrides: Any) -> ServerConfig:
    values: dict[str, Any] = {
        "policies_dir": policy_dir,
        "cert_path": tls.cert,
        "key_path": tls.key,
        "host": "127.0.0.1",
        "port": 0,
        "metrics_port": 0,
        "settings": EngineSettings(prefetch_image="registry.example/topoplace:test"),
        "tls_reload_interval": 0.05,
        "policy_poll_interval": 0.1,
        "shutdown_timeout": 5.0,
    }
    values.update(overrides)
    return ServerConfig(**values)


@pytest.fixture
async def server(policy_dir: Path, tls_files: TlsFiles) -> AsyncIterator[WebhookServer]:
    async with WebhookServer(server_config(policy_dir, tls_files)) as running:
        yield running


@pytest.fixture
async def client(tls_files: TlsFiles) -> AsyncIterator[aiohttp.ClientSession]:
    connector = aiohttp.TCPConnector(ssl=tls_files.client_context(), limit=250)
    async with aiohttp.ClientSession(connector=connector) as session:
        yield session


# --- AdmissionReview bodies -------------------------------------------------------------------


def admission_review(
    obj: dict[str, Any] | None,
    *,
    operation: str = "CREATE",
    namespace: str | None = "ml-team",
    kind: tuple[str, str, str] = ("", "v1", "Pod"),
    resource: str = "pods",
    dry_run: bool = False,
    old: dict[str, Any] | None = None,
    uid: str | None = None,
) -> dict[str, Any]:
    """A v1 AdmissionReview as kube-apiserver sends it (field set of admission/v1)."""
    group, version, kind_name = kind
    gvk = {"group": group, "version": version, "kind": kind_name}
    gvr = {"group": group, "version": version, "resource": resource}
    request: dict[str, Any] = {
        "uid": uid or str(uuid.uuid4()),
        "kind": gvk,
        "resource": gvr,
        "requestKind": gvk,
        "requestResource": gvr,
        "operation": operation,
        "userInfo": {
            "username": "system:serviceaccount:kube-system:job-controller",
            "uid": "4e2a7b1c-1b0e-4c51-9d5a-2f9a0e6f7a10",
            "groups": ["system:serviceaccounts", "system:authenticated"],
        },
        "object": obj,
        "oldObject": old,
        "dryRun": dry_run,
        "options": {
            "kind": {"CREATE": "CreateOptions", "UPDATE": "UpdateOptions"}.get(
                operation, "DeleteOptions"
            ),
            "apiVersion": "meta.k8s.io/v1",
        },
    }
    if namespace is not None:
        request["namespace"] = namespace
    if obj is not None and obj.get("metadata", {}).get("name"):
        request["name"] = obj["metadata"]["name"]
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": request}


def gpu_pod(
    *,
    gpus: int = 2,
    policy: str | None = "ddp",
    name: str | None = None,
    command: list[str] | None = None,
) -> dict[str, Any]:
    """A controller-created training pod: generateName, defaulted fields, projected SA token."""
    labels = {"job-name": "train-7f9c", "batch.kubernetes.io/job-name": "train-7f9c"}
    if policy is not None:
        labels["topoplace.io/policy"] = policy
    metadata: dict[str, Any] = {
        "generateName": "train-7f9c-0-",
        "labels": labels,
        "ownerReferences": [
            {
                "apiVersion": "batch/v1",
                "kind": "Job",
                "name": "train-7f9c",
                "uid": "b3f1c2d4-5e6f-4a7b-8c9d-0e1f2a3b4c5d",
                "controller": True,
                "blockOwnerDeletion": True,
            }
        ],
    }
    if name is not None:
        metadata["name"] = name
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": metadata,
        "spec": {
            "containers": [
                {
                    "name": "trainer",
                    "image": "nvcr.io/nvidia/pytorch:24.05-py3",
                    "command": command or ["torchrun", "--nproc-per-node=2", "train.py"],
                    "resources": {"limits": {"nvidia.com/gpu": str(gpus)}},
                    "terminationMessagePath": "/dev/termination-log",
                    "terminationMessagePolicy": "File",
                    "imagePullPolicy": "IfNotPresent",
                    "volumeMounts": [
                        {
                            "name": "kube-api-access-x7k2p",
                            "readOnly": True,
                            "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount",
                        }
                    ],
                }
            ],
            "restartPolicy": "Never",
            "terminationGracePeriodSeconds": 30,
            "dnsPolicy": "ClusterFirst",
            "serviceAccountName": "default",
            "serviceAccount": "default",
            "securityContext": {},
            "schedulerName": "default-scheduler",
            "tolerations": [
                {
                    "key": "node.kubernetes.io/not-ready",
                    "operator": "Exists",
                    "effect": "NoExecute",
                    "tolerationSeconds": 300,
                }
            ],
            "priority": 0,
            "enableServiceLinks": True,
            "preemptionPolicy": "PreemptLowerPriority",
            "volumes": [
                {
                    "name": "kube-api-access-x7k2p",
                    "projected": {
                        "sources": [
                            {"serviceAccountToken": {"expirationSeconds": 3607, "path": "token"}},
                            {
                                "configMap": {
                                    "name": "kube-root-ca.crt",
                                    "items": [{"key": "ca.crt", "path": "ca.crt"}],
                                }
                            },
                            {
                                "downwardAPI": {
                                    "items": [
                                        {
                                            "path": "namespace",
                                            "fieldRef": {
                                                "apiVersion": "v1",
                                                "fieldPath": "metadata.namespace",
                                            },
                                        }
                                    ]
                                }
                            },
                        ],
                        "defaultMode": 420,
                    },
                }
            ],
        },
    }


def decode_patch(response: dict[str, Any]) -> list[dict[str, Any]]:
    if "patch" not in response:
        return []
    return json.loads(base64.b64decode(response["patch"], validate=True))


async def post_review(
    session: aiohttp.ClientSession, url: str, review: dict[str, Any] | bytes
) -> tuple[int, Any]:
    """POST a review; (status, parsed JSON answer) or (status, text) for non-JSON answers."""
    data = review if isinstance(review, bytes) else json.dumps(review).encode()
    async with session.post(url, data=data, headers={"Content-Type": "application/json"}) as resp:
        if resp.content_type == "application/json":
            return resp.status, await resp.json()
        return resp.status, await resp.text()


async def wait_until(check: Callable[[], Awaitable[bool]], what: str) -> None:
    """Poll `check` for up to 10 s (reloads are event- or poll-driven, never instant)."""
    try:
        async with asyncio.timeout(10):
            while True:
                if await check():
                    return
                await asyncio.sleep(0.05)
    except TimeoutError:
        raise AssertionError(f"timed out waiting for {what}") from None


async def warning_counts(
    client: aiohttp.ClientSession, server: WebhookServer, policy: str
) -> dict[str, float]:
    """kind -> warning lines the server counted for `policy`, as its metrics port serves them
    (zeros included)."""
    async with client.get(f"http://127.0.0.1:{server.metrics_port}/metrics") as resp:
        assert resp.status == 200
        text = await resp.text()
    name = "topoplace_webhook_admission_warnings_total"
    found = re.findall(rf'^{name}\{{kind="(\w+)",policy="{policy}"\}} (\S+)$', text, re.M)
    return {kind: float(value) for kind, value in found}


async def sent_warnings(
    client: aiohttp.ClientSession, server: WebhookServer, policy: str
) -> dict[str, float]:
    """The kinds with warnings counted for `policy`, and how many."""
    return {k: n for k, n in (await warning_counts(client, server, policy)).items() if n}
