"""Topoplace on the local cluster: the manifests applied, and their pods run by the nodes'
kubelets. The e2e runtime runs our image's containers as host processes, so the webhook, its
certs sidecar, the claim-template reconciler and the agents are the real programs with what the
kubelet resolved for them: command, downward API, ConfigMap projection, projected token."""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

from e2e import procs
from e2e.kube import Kubectl, get_url

__all__ = [
    "AGENT_METRICS_PORT",
    "NAMESPACE",
    "agent_pods",
    "install",
    "pods_of",
    "wait_agents_ready",
    "wait_running",
    "wait_webhook_ready",
]

NAMESPACE = "topoplace-system"
REPO = Path(__file__).resolve().parents[2]
OVERLAY = REPO / "e2e" / "overlays" / "base"
VENV_BIN = Path(sys.executable).parent
AGENT_METRICS_PORT = 9101  # the DaemonSet's containerPort, on each pod's own IP
WEBHOOK_PORT = 8443

Say = Callable[[str], None]


def render(k: Kubectl, overlay: Path = OVERLAY) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(k("kustomize", str(overlay))) if d]


def install(k: Kubectl, say: Say) -> list[dict[str, Any]]:
    objects = render(k)
    k("apply", "-k", str(OVERLAY))
    say(f"manifests applied: kubectl apply -k {OVERLAY.relative_to(REPO)} ({len(objects)} objects)")
    return objects


def pods_of(k: Kubectl, app: str) -> list[dict[str, Any]]:
    """The live pods of `app` in topoplace-system, by name."""
    pods = k.json("get", "pods", "-n", NAMESPACE, "-l", f"app.kubernetes.io/name={app}")
    live = [p for p in pods["items"] if not p["metadata"].get("deletionTimestamp")]
    return sorted(live, key=lambda p: p["metadata"]["name"])


def _ready(pod: dict[str, Any]) -> bool:
    conditions = pod.get("status", {}).get("conditions", [])
    return any(c["type"] == "Ready" and c["status"] == "True" for c in conditions)


def agent_pods(k: Kubectl) -> dict[str, dict[str, Any]]:
    """node name → its agent pod."""
    return {
        p["spec"]["nodeName"]: p for p in pods_of(k, "topoplace-agent") if p["spec"].get("nodeName")
    }


def _rollout(k: Kubectl, what: str, timeout: int) -> None:
    k.run("rollout", "status", what, "-n", NAMESPACE, f"--timeout={timeout}s", timeout=timeout + 10)


def wait_webhook_ready(k: Kubectl, replicas: int | None = None) -> list[str]:
    """Every webhook replica Ready (its readiness probe: policies loaded, TLS ready) and
    answering /readyz on its pod IP; returns the pod IPs."""

    def ips() -> list[str] | None:
        pods = pods_of(k, "topoplace-webhook")
        want = replicas if replicas is not None else len(pods)
        ready = [p["status"]["podIP"] for p in pods if _ready(p) and p["status"].get("podIP")]
        if not pods or len(ready) < want:
            return None
        ok = all(
            get_url(f"https://{ip}:{WEBHOOK_PORT}/readyz", verify=False).strip() for ip in ready
        )
        return ready if ok else None

    return procs.wait_for(
        ips, "topoplace-webhook pods Ready (kubelet readiness probe)", timeout=120
    )


def wait_agents_ready(k: Kubectl, nodes: list[str], timeout: float = 120) -> dict[str, str]:
    """node → agent metrics URL, once each node's agent pod is Ready (first reconcile done)."""

    def urls() -> dict[str, str] | None:
        pods = agent_pods(k)
        if not all(n in pods and _ready(pods[n]) for n in nodes):
            return None
        return {n: f"http://{pods[n]['status']['podIP']}:{AGENT_METRICS_PORT}" for n in nodes}

    return procs.wait_for(
        urls,
        f"a Ready topoplace-agent pod on {', '.join(nodes)} (kubelet readiness probe)",
        timeout=timeout,
    )


def wait_running(k: Kubectl, nodes: list[str], say: Say) -> dict[str, Any]:
    """Wait until the kubelets run every Topoplace pod Ready; what the tests need to find them."""
    _rollout(k, "deployment/topoplace-webhook", 180)
    procs.wait_for(
        lambda: k.json("get", "mutatingwebhookconfiguration", "topoplace-webhook")["webhooks"][0][
            "clientConfig"
        ].get("caBundle"),
        "caBundle of MutatingWebhookConfiguration topoplace-webhook (certs sidecar)",
    )
    ips = wait_webhook_ready(k)
    say(
        f"webhook Ready on {', '.join(ips)} (run by the kubelets; certs sidecar wrote the caBundle)"
    )
    _rollout(k, "deployment/topoplace-claim-templates", 120)
    say("DRA claim-template reconciler Ready")
    _rollout(k, "daemonset/topoplace-agent", 180)
    agents = wait_agents_ready(k, nodes)
    say(f"agents Ready on {len(agents)} nodes, each with its pod's projected token")
    return {"agent_metrics": agents}
