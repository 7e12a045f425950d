"""Kyverno's admission controller as a peer: built from the Go module proxy
(e2e/build-kyverno.sh), run on 127.0.0.1 as its Helm chart runs it, with one ClusterPolicy
that writes the given JSON patch (`patchesJson6902`) on pods labelled for it.

Out of cluster, as Kyverno supports it (`--serverIP`): it registers its webhooks with a
127.0.0.1 URL, so the API server reaches it through the same egress proxy as ours. Its
CRDs come from the same module's config/crds. Everything it creates goes at exit.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from benchmarks.peers.map_policy import PEER_LABEL

__all__ = [
    "NAMESPACE",
    "apply_until_served",
    "kyverno_binary",
    "kyverno_policy",
    "running_kyverno",
]

_REPO = Path(__file__).resolve().parents[2]
NAMESPACE = "kyverno"
_STARTUP_S = 300  # a cold start on 2 busy cores: CRD informers, certificates, webhooks


def _versions() -> dict[str, str]:
    out = subprocess.run(
        ["bash", "-c", f". {_REPO}/e2e/versions.sh && echo $KYVERNO_VERSION && e2e_kyverno_dir"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split("\n")
    return {"version": out[0], "bin": out[1]}


def kyverno_binary() -> tuple[Path | None, str]:
    """(the built binary, its version) or (None, why not: the build log's last lines)."""
    info = _versions()
    binary = Path(info["bin"]) / "kyverno"
    if binary.is_file():
        return binary, info["version"]
    log = Path(info["bin"]) / "build.log"
    why = log.read_text()[-1500:] if log.is_file() else "e2e/build-kyverno.sh has not finished"
    return None, f"kyverno {info['version']} not built: {why}"


def kyverno_policy(name: str, patch: list[dict[str, Any]], peer: str = "kyverno") -> dict[str, Any]:
    return {
        "apiVersion": "kyverno.io/v1",
        "kind": "ClusterPolicy",
        "metadata": {"name": name},
        "spec": {
            "background": False,
            "admission": True,
            "rules": [
                {
                    "name": "topoplace-patch",
                    "match": {
                        "any": [
                            {
                                "resources": {
                                    "kinds": ["Pod"],
                                    "operations": ["CREATE"],
                                    "selector": {"matchLabels": {PEER_LABEL: peer}},
                                }
                            }
                        ]
                    },
                    "mutate": {"patchesJson6902": json.dumps(patch)},
                }
            ],
        },
    }


def _crd_dir(version: str) -> Path:
    out = subprocess.run(
        ["go", "mod", "download", "-json", f"github.com/kyverno/kyverno@{version}"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return Path(json.loads(out)["Dir"]) / "config" / "crds"


def _free_port() -> int:
    # Kyverno takes its port as a flag and cannot report one it picked: ask the kernel for a
    # free one (a race only with another process binding in the next moment).
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextlib.contextmanager
def running_kyverno(
    kubectl: Any, kubeconfig: Path, binary: Path, version: str, log: Path
) -> Iterator[int]:
    """CRDs, namespace, the controller; yields its webhook port once its mutating webhook
    configuration is registered. Removes all of it at exit."""
    crds = _crd_dir(version)
    for group in ("kyverno", "policies.kyverno.io", "policyreport", "reports"):
        kubectl("apply", "--server-side", "-f", str(crds / group))
    kubectl.run("create", "namespace", NAMESPACE, check=False)
    # Its webhooks see only the pods labelled for it, as ours sees only opted-in pods (the
    # `webhooks` key of its ConfigMap sets their objectSelector): no other row pays its hop.
    selector = {"objectSelector": {"matchLabels": {PEER_LABEL: "kyverno"}}}
    kubectl(
        "create",
        "configmap",
        "kyverno",
        "-n",
        NAMESPACE,
        f"--from-literal=webhooks={json.dumps(selector)}",
    )
    port, metrics = _free_port(), _free_port()
    env = {
        **os.environ,
        "KYVERNO_NAMESPACE": NAMESPACE,
        "KYVERNO_SERVICEACCOUNT_NAME": "kyverno-admission-controller",
        "KYVERNO_ROLE_NAME": "kyverno:admission-controller",
        "KYVERNO_DEPLOYMENT": "kyverno-admission-controller",
        "KYVERNO_POD_NAME": "kyverno-admission-controller-bench",
        "KYVERNO_SVC": "kyverno-svc",
        "INIT_CONFIG": "kyverno",
        "METRICS_CONFIG": "kyverno-metrics",
    }
    argv = [
        str(binary),
        f"--kubeconfig={kubeconfig}",
        f"--serverIP=127.0.0.1:{port}",
        "--webhookServerHost=127.0.0.1",
        f"--webhookServerPort={port}",
        f"--metricsPort={metrics}",
        "--controllerRuntimeMetricsAddress=0",
        # The Helm chart's defaults for the admission controller:
        "--caSecretName=kyverno-svc.kyverno.svc.kyverno-tls-ca",
        "--tlsSecretName=kyverno-svc.kyverno.svc.kyverno-tls-pair",
        "--servicePort=443",
        "--resyncPeriod=15m",
        "--admissionReports=true",
        "--dumpPayload=false",
        "--forceFailurePolicyIgnore=false",
        "--enablePolicyException=false",
        "--protectManagedResources=false",
        "--allowInsecureRegistry=false",
        "--loggingFormat=text",
        "--v=2",
        "--omitEvents=PolicyApplied,PolicySkipped",
    ]
    with log.open("w") as out:
        process = subprocess.Popen(argv, env=env, stdout=out, stderr=subprocess.STDOUT)
    try:
        _wait_registered(kubectl, process, log)
        yield port
    finally:
        process.terminate()
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        for kind in ("mutatingwebhookconfigurations", "validatingwebhookconfigurations"):
            names = kubectl.run("get", kind, "-o", "name", check=False).stdout.split()
            for name in names:
                if "kyverno" in name:
                    kubectl.run("delete", name, "--wait=false", check=False)
        kubectl.run("delete", "namespace", NAMESPACE, "--wait=false", check=False)


def _wait_registered(kubectl: Any, process: subprocess.Popen[bytes], log: Path) -> None:
    deadline = time.monotonic() + _STARTUP_S
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"kyverno exited {process.returncode}: {log.read_text()[-2000:]}")
        names = kubectl.run(
            "get", "mutatingwebhookconfigurations", "-o", "name", check=False
        ).stdout
        if "kyverno-resource-mutating-webhook-cfg" in names:
            return
        time.sleep(1)
    raise RuntimeError(f"kyverno registered no mutating webhook in {_STARTUP_S} s: {log}")


def apply_until_served(k: Any, obj: dict[str, Any], seconds: float = 180) -> None:
    """Kyverno validates its own policies by webhook: its server may still be loading the
    serving pair it just made (TLS alert) when its webhook is already registered."""
    deadline = time.monotonic() + seconds
    while True:
        try:
            k.apply(obj)
            return
        except RuntimeError:  # kubectl's failure, with its message
            if time.monotonic() > deadline:
                raise
            time.sleep(2)
