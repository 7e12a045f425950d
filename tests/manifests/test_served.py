"""What the manifests point at is really served: the webhook started with the Deployment's own
args (paths mapped onto local copies of its volumes, ports on 0), reached the way the API
server and the kubelet reach it; the agent's probe paths on its health server."""

from __future__ import annotations

import asyncio
import base64
import datetime as dt
import json
import os
import ssl
import sys
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import jsonpatch
import pytest
import pytest_asyncio
import yaml

from tests.kube import assert_valid
from tests.manifests.rendered import REPO, Rendering, render
from webhook.certs import bootstrap as cb
from webhook.certs.keys import write_pair
from webhook.vocabulary import POLICY_LABEL

_PORT_FLAGS = ("--port", "--metrics-port")


def _configmap_volume(target: Path, data: dict[str, str]) -> None:
    """Lay out a ConfigMap volume as the kubelet does: files behind the ..data symlink."""
    stamp = target / "..2026_11_29_10_00_00.000000001"
    stamp.mkdir(parents=True)
    for name, text in data.items():
        (stamp / name).write_text(text)
        (target / name).symlink_to(Path("..data") / name)
    (target / "..data").symlink_to(stamp.name)


def _prepare_volumes(r: Rendering, spec: dict[str, Any], root: Path) -> dict[str, Path]:
    """Local stand-ins for the serve container's volumes: mountPath → directory."""
    service = r.one("Service", "topoplace-webhook")["metadata"]
    names = cb.service_dns_names(service["name"], service["namespace"])
    now = dt.datetime.now(dt.UTC)
    material = cb.issue(
        cb.assess(None, dns_names=names, now=now, renew_before=dt.timedelta(1)),
        None,
        dns_names=names,
        now=now,
        validity_days=30,
    )
    volumes = {v["name"]: v for v in spec["volumes"]}
    (serve,) = spec["containers"]
    mapping: dict[str, Path] = {}
    for mount in serve["volumeMounts"]:
        local = root / mount["name"]
        volume = volumes[mount["name"]]
        if "configMap" in volume:
            _configmap_volume(local, r.one("ConfigMap", volume["configMap"]["name"])["data"])
        else:
            local.mkdir()
        mapping[mount["mountPath"]] = local
    (root / "ca.crt").write_bytes(material.ca.cert_pem)
    # as the certs sidecar leaves it on the shared volume
    tls_dir = next(p for m, p in mapping.items() if m == "/tls")
    write_pair(material.serving, tls_dir / "tls.crt", tls_dir / "tls.key")
    return mapping


def _local_args(args: list[str], mapping: dict[str, Path]) -> list[str]:
    out = []
    for arg in args:
        name, _, value = arg.partition("=")
        if name in _PORT_FLAGS:
            arg = f"{name}=0"  # tests bind port 0 and read the real port back
        else:
            for mount_path, local in mapping.items():
                if value.startswith(mount_path + "/") or value == mount_path:
                    arg = f"{name}={local}{value[len(mount_path) :]}"
        out.append(arg)
    return [*out, "--host=127.0.0.1"]


class Served:
    def __init__(self, ports: dict[str, int], ca: Path, spec: dict[str, Any]) -> None:
        self.ports = ports  # flag → bound port
        self.ca = ca
        self.spec = spec

    def port_for(self, container_port: int | str) -> int:
        """The bound port behind a containerPort (number or name), via the flag set to it."""
        (serve,) = self.spec["containers"]
        (port,) = [p for p in serve["ports"] if container_port in (p["name"], p["containerPort"])]
        for arg in serve["args"]:
            name, _, value = arg.partition("=")
            if name in _PORT_FLAGS and value == str(port["containerPort"]):
                return self.ports[name]
        raise LookupError(f"no flag sets port {container_port}")


# One webhook process for the module: starting Python with the engine costs seconds.
pytestmark = pytest.mark.asyncio(loop_scope="module")


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def served(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Served]:
    tmp_path = tmp_path_factory.mktemp("webhook")
    r = render()
    spec = r.one("Deployment", "topoplace-webhook")["spec"]["template"]["spec"]
    (serve,) = spec["containers"]
    mapping = _prepare_volumes(r, spec, tmp_path)
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "webhook",
        *_local_args(serve["args"], mapping),
        env={**os.environ, "PYTHONPATH": str(REPO)},
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    ports: dict[str, int] = {}
    try:
        assert proc.stdout is not None
        while len(ports) < 2:
            line = (await asyncio.wait_for(proc.stdout.readline(), timeout=60)).decode()
            if not line:
                assert proc.stderr is not None
                raise AssertionError((await proc.stderr.read()).decode()[-3000:])
            key, _, url = line.strip().partition(": ")
            if key in ("listening", "metrics"):
                port = int(url.split("://", 1)[1].split("/", 1)[0].rsplit(":", 1)[1])
                ports["--port" if key == "listening" else "--metrics-port"] = port
        yield Served(ports, tmp_path / "ca.crt", spec)
    finally:
        if proc.returncode is None:
            proc.terminate()
        await asyncio.wait_for(proc.wait(), timeout=30)


def _kubelet_ssl() -> ssl.SSLContext:
    # The kubelet does not verify certificates of HTTPS probes.
    ctx = ssl.create_default_context()
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    return ctx


async def test_every_webhook_probe_is_answered(served: Served) -> None:
    (serve,) = served.spec["containers"]
    probes = [serve[p]["httpGet"] for p in ("startupProbe", "livenessProbe", "readinessProbe")]
    async with aiohttp.ClientSession() as session:
        for probe in probes:
            scheme = probe.get("scheme", "HTTP").lower()
            url = f"{scheme}://127.0.0.1:{served.port_for(probe['port'])}{probe['path']}"
            async with session.get(url, ssl=_kubelet_ssl() if scheme == "https" else None) as resp:
                assert resp.status == 200, f"{url}: {await resp.text()}"


async def test_metrics_port_of_the_service_serves_prometheus_text(served: Served) -> None:
    service = render().one("Service", "topoplace-webhook")
    (port,) = [p for p in service["spec"]["ports"] if p["name"] == "metrics"]
    url = f"http://127.0.0.1:{served.port_for(port['targetPort'])}/metrics"
    async with aiohttp.ClientSession() as session, session.get(url) as resp:
        assert resp.status == 200
        assert "# TYPE" in await resp.text()


def _policy_without_namespace_limit() -> str:
    configmap = render().one("ConfigMap", "topoplace-policies")
    for text in configmap["data"].values():
        for doc in yaml.safe_load_all(text):
            if doc and not doc["spec"].get("namespaces"):
                return str(doc["metadata"]["name"])
    raise LookupError("every example policy limits namespaces")


async def test_api_server_call_through_the_webhook_configuration_is_mutated(
    served: Served,
) -> None:
    r = render()
    hook = r.one("MutatingWebhookConfiguration")["webhooks"][0]
    ref = hook["clientConfig"]["service"]
    service = r.one("Service", ref["name"])
    (port,) = [p for p in service["spec"]["ports"] if p["port"] == ref["port"]]
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": "trainer-0",
            "namespace": "ml-team",
            "labels": {POLICY_LABEL: _policy_without_namespace_limit()},
        },
        "spec": {
            "containers": [
                {
                    "name": "trainer",
                    "image": "nvcr.io/nvidia/pytorch:24.05-py3",
                    "resources": {"limits": {"nvidia.com/gpu": "2"}},
                }
            ]
        },
    }
    uid = str(uuid.uuid4())
    review = {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": uid,
            "kind": {"group": "", "version": "v1", "kind": "Pod"},
            "resource": {"group": "", "version": "v1", "resource": "pods"},
            "requestKind": {"group": "", "version": "v1", "kind": "Pod"},
            "requestResource": {"group": "", "version": "v1", "resource": "pods"},
            "name": "trainer-0",
            "namespace": "ml-team",
            "operation": "CREATE",
            "userInfo": {"username": "alice", "groups": ["system:authenticated"]},
            "object": pod,
            "oldObject": None,
            "dryRun": False,
            "options": {"apiVersion": "meta.k8s.io/v1", "kind": "CreateOptions"},
        },
    }
    # As the API server: trust only caBundle, verify the name <service>.<namespace>.svc
    ctx = ssl.create_default_context(cafile=str(served.ca))
    url = f"https://127.0.0.1:{served.port_for(port['targetPort'])}{ref['path']}"
    server_name = f"{ref['name']}.{ref['namespace']}.svc"
    async with (
        aiohttp.ClientSession() as session,
        session.post(url, json=review, ssl=ctx, server_hostname=server_name) as resp,
    ):
        assert resp.status == 200, await resp.text()
        answer = await resp.json()
    response = answer["response"]
    assert response["uid"] == uid and response["allowed"] is True
    assert response["patchType"] == "JSONPatch"
    patch = json.loads(base64.b64decode(response["patch"]))
    mutated = jsonpatch.apply_patch(pod, patch)
    assert mutated != pod
    assert_valid(mutated)


async def test_every_agent_probe_path_is_served() -> None:
    from agent.sync.health.server import AgentMetrics, HealthServer

    agent = render().one("DaemonSet", "topoplace-agent")["spec"]["template"]["spec"]
    (container,) = agent["containers"]
    paths = {container[p]["httpGet"]["path"] for p in ("livenessProbe", "readinessProbe")}
    paths.add("/metrics")  # scraped on the same port
    async with (
        HealthServer(AgentMetrics(), host="127.0.0.1", port=0) as server,
        aiohttp.ClientSession() as session,
    ):
        for path in sorted(paths):
            async with session.get(f"http://127.0.0.1:{server.port}{path}") as resp:
                # /readyz is 503 until the first reconcile: served, just not ready yet
                expected = {503} if path == "/readyz" else {200}
                assert resp.status in expected, f"{path}: {resp.status}"
