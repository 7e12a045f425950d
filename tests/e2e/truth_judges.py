"""The three judges of a pod bound to a node, asked the way their users ask them: `explain
--output json` (a platform engineer), the scheduler extender's `POST /scheduler/filter` on a
webhook pod's IP (kube-scheduler), and the node's real kubelet (it runs or refuses the pod).
Plus the node state they judge against: its NodeResourceTopology's available counts, and its
kubelet's configuration as the kubelet merges it."""

from __future__ import annotations

import http.client
import json
import socket
import ssl
import subprocess
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from e2e import procs
from e2e.cluster import Cluster
from e2e.kube import Kubectl
from e2e.topoplace.install import WEBHOOK_PORT, pods_of
from tests.e2e.helpers import WEBHOOK
from webhook.scheduler.catchup import RETRY_S

__all__ = [
    "Verdict",
    "available",
    "explain_all",
    "extender",
    "kubelet_config",
    "kubelet_outcome",
    "wait_available",
]

# The name the webhook's serving certificate carries (webhook/certs/bootstrap.py).
SERVICE_NAME = "topoplace-webhook.topoplace-system.svc"
Available = dict[str, dict[str, str]]  # zone -> resource -> available


@dataclass(frozen=True)
class Verdict:
    """fits: admitted / would admit. reason: why not (the kubelet: its status reason);
    detail: the check that failed (explain) or the kubelet's status message."""

    fits: bool
    reason: str = ""
    detail: str = ""

    def word(self) -> str:
        return "fits" if self.fits else f"no: {self.reason}"


def explain_all(
    cluster: Cluster, pods: Sequence[Mapping[str, Any]], namespace: str, tmp: Path
) -> list[Verdict]:
    """explain's verdict on each pod's own node (`spec.nodeName`), all asked at once: each is
    a separate process reading the cluster, and the nodes they judge do not change meanwhile."""
    running = []
    for pod in pods:
        path = tmp / f"{pod['metadata']['name']}.json"
        path.write_text(json.dumps(pod))
        argv = [
            WEBHOOK,
            "explain",
            f"--kubeconfig={cluster.kubeconfig}",
            f"--namespace={namespace}",
            "--output=json",
            str(path),
        ]
        running.append(subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE))
    verdicts = []
    for pod, proc in zip(pods, running, strict=True):
        out, err = proc.communicate(timeout=120)
        assert proc.returncode in (0, 1), f"explain {pod['metadata']['name']}: {err.decode()}"
        nodes = json.loads(out)["nodes"]
        (said,) = [n for n in nodes if n["node"] == pod["spec"]["nodeName"]]
        verdicts.append(
            Verdict(bool(said["fits"]), said.get("reason") or "", said.get("check") or "")
        )
    return verdicts


def _webhook_ip(kubectl: Kubectl) -> str:
    def ready(p: dict[str, Any]) -> bool:
        conditions = p["status"].get("conditions") or []
        return any(c["type"] == "Ready" and c["status"] == "True" for c in conditions)

    ips = [p["status"]["podIP"] for p in pods_of(kubectl, "topoplace-webhook") if ready(p)]
    assert ips, "no Ready webhook pod to ask the extender"
    return sorted(ips)[0]


def extender(cluster: Cluster, kubectl: Kubectl, pod: Mapping[str, Any], node: str) -> Verdict:
    """`POST /scheduler/filter` with ExtenderArgs for `pod` and `node`, over HTTPS to a webhook
    pod as kube-scheduler reaches it (its Service's name checked against the certificate).
    The pod goes as kube-scheduler sends it: stored (defaulted), not yet bound.

    An `Error` answer while the node's NodeResourceTopology catches up with a pod that just
    started or ended there (webhook/scheduler/catchup.py) is no verdict: kube-scheduler asks
    again after its backoff, and so does this, for as long as the extender may answer so."""
    sent = json.loads(json.dumps(pod))
    sent["spec"].pop("nodeName", None)
    body = json.dumps({"Pod": sent, "NodeNames": [node]}).encode()
    deadline = time.monotonic() + RETRY_S + 5
    while True:
        result = _filter(cluster, kubectl, body)
        if not result.get("Error") or time.monotonic() > deadline:
            break
        time.sleep(1.0)  # kube-scheduler's first backoff
    assert not result.get("Error"), result
    if node in (result.get("NodeNames") or []):
        return Verdict(True)
    return Verdict(False, (result.get("FailedNodes") or {}).get(node, "dropped, no reason"))


def _filter(cluster: Cluster, kubectl: Kubectl, body: bytes) -> dict[str, Any]:
    context = ssl.create_default_context(
        cafile=str(cluster.state / "pki" / "topoplace-webhook-ca.crt")
    )
    ip = _webhook_ip(kubectl)
    conn = http.client.HTTPSConnection(ip, WEBHOOK_PORT, context=context, timeout=10)
    raw = socket.create_connection((ip, WEBHOOK_PORT), timeout=10)
    conn.sock = context.wrap_socket(raw, server_hostname=SERVICE_NAME)
    try:
        conn.request("POST", "/scheduler/filter", body, {"Content-Type": "application/json"})
        response = conn.getresponse()
        text = response.read().decode()
    finally:
        conn.close()
    assert response.status == 200, f"extender answered {response.status}: {text}"
    result: dict[str, Any] = json.loads(text)
    return result


def kubelet_outcome(kubectl: Kubectl, namespace: str, name: str, timeout: float = 90) -> Verdict:
    """The kubelet's verdict on a pod bound by nodeName: Running, or Failed at admission with
    its reason (TopologyAffinityError, OutOf…, UnexpectedAdmissionError) and message."""

    def settled() -> Verdict | None:
        status = kubectl.json("get", "pod", name, "-n", namespace)["status"]
        if status.get("phase") == "Running":
            return Verdict(True)
        if status.get("phase") == "Failed":
            return Verdict(False, status.get("reason", ""), status.get("message", ""))
        return None

    return procs.wait_for(
        settled, f"the kubelet to run or refuse {namespace}/{name}", timeout=timeout
    )


def available(kubectl: Kubectl, node: str) -> Available | None:
    """Every zone's available counts in `node`'s NodeResourceTopology (None: none yet)."""
    done = kubectl.run("get", "noderesourcetopology", node, "-o", "json", check=False)
    if done.returncode != 0:
        return None
    zones = json.loads(done.stdout).get("zones") or []
    return {
        z["name"]: {r["name"]: str(r["available"]) for r in z.get("resources") or []} for z in zones
    }


def wait_available(
    kubectl: Kubectl, node: str, want: Available, what: str, timeout: float = 90
) -> None:
    procs.wait_for(
        lambda: available(kubectl, node) == want,
        f"NodeResourceTopology {node} back to {what}",
        timeout=timeout,
    )


def kubelet_config(cluster: Cluster, node: str) -> dict[str, Any]:
    """The node's KubeletConfiguration: its file, then its drop-ins in name order, as the
    kubelet merges them (both written as JSON by e2e/nodes/kubelet.py)."""
    rec = cluster.nodes[node]
    merged: dict[str, Any] = json.loads(Path(rec["kubelet_config"]).read_text())
    for dropin in sorted(Path(rec["kubelet_config_dir"]).glob("*.conf")):
        merged |= json.loads(dropin.read_text())
    return merged


def config_word(config: Mapping[str, Any]) -> str:
    """`restricted/pod cpu=static mem=Static`: what decides admission, in the kubelet's words
    (a field left out has the kubelet's default)."""
    policy = config.get("topologyManagerPolicy", "none")
    scope = config.get("topologyManagerScope", "container")
    cpu = config.get("cpuManagerPolicy", "none")
    memory = config.get("memoryManagerPolicy", "None")
    return f"{policy}/{scope} cpu={cpu} mem={memory}"
