"""Topoplace on the local control plane: the manifests applied, and the webhook, its certs
sidecar and one agent per node running as the manifests run them, beside the pods that the
nodes' kubelets run for them."""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

from common.cache_layout import DEFAULT_CACHE_ROOT
from e2e import procs
from e2e.controlplane.start import ControlPlane
from e2e.kube import Kubectl, get_url, write_kubeconfig
from e2e.topoplace.pods import local_container, pod_spec_of, uses_api_token

__all__ = [
    "NAMESPACE",
    "install",
    "start_agents",
    "start_claim_templates",
    "start_webhook",
]

NAMESPACE = "topoplace-system"
REPO = Path(__file__).resolve().parents[2]
OVERLAY = REPO / "e2e" / "overlays" / "base"
VENV_BIN = Path(sys.executable).parent
EXECUTABLES = {name: str(VENV_BIN / name) for name in ("topoplace-webhook", "topoplace-agent")}
TOKEN_SECONDS = 48 * 3600  # outlives any test run; a kubelet would refresh it hourly

Say = Callable[[str], None]


def render(k: Kubectl, overlay: Path = OVERLAY) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(k("kustomize", str(overlay))) if d]


def install(k: Kubectl, say: Say) -> list[dict[str, Any]]:
    objects = render(k)
    k("apply", "-k", str(OVERLAY))
    procs.wait_for(
        lambda: (
            k.run("get", "serviceaccount", "default", "-n", NAMESPACE, check=False).returncode == 0
        ),
        "serviceaccount default in topoplace-system (serviceaccount-controller)",
    )
    say(f"manifests applied: kubectl apply -k {OVERLAY.relative_to(REPO)} ({len(objects)} objects)")
    return objects


def _bound_pods(k: Kubectl, app: str) -> dict[str, str]:
    """node name → pod name of the `app` pods the scheduler has bound."""
    pods = k.json("get", "pods", "-n", NAMESPACE, "-l", f"app.kubernetes.io/name={app}")
    return {
        p["spec"]["nodeName"]: p["metadata"]["name"]
        for p in pods["items"]
        if p["spec"].get("nodeName") and not p["metadata"].get("deletionTimestamp")
    }


def _token_kubeconfig(cp: ControlPlane, k: Kubectl, sa: str, pod: str, name: str) -> Path:
    """A kubeconfig holding a TokenRequest token bound to `pod`, like a projected token."""
    token = k(
        "create",
        "token",
        sa,
        "-n",
        NAMESPACE,
        "--bound-object-kind=Pod",
        f"--bound-object-name={pod}",
        f"--duration={TOKEN_SECONDS}s",
    ).strip()
    return write_kubeconfig(
        cp.state / "kubeconfigs" / f"{name}.kubeconfig",
        server=cp.server,
        ca=cp.pki.ca,
        user=f"{sa}@{pod}",
        token=token,
    )


def _token_args(spec: dict[str, Any], container: str, kubeconfig: Path) -> list[str]:
    """The pod's service-account token, as a kubeconfig, for a container that mounts one."""
    return [f"--kubeconfig={kubeconfig}"] if uses_api_token(spec, container) else []


def _start(cp: ControlPlane, name: str, argv: list[str], env: dict[str, str]) -> dict[str, Any]:
    procs.start(cp.state, name, argv, env=env, cwd=REPO)
    return {"argv": argv, "env": env}


def start_webhook(
    cp: ControlPlane, k: Kubectl, objects: list[dict[str, Any]], say: Say
) -> dict[str, dict[str, Any]]:
    spec = pod_spec_of(objects, "Deployment", "topoplace-webhook")
    pods = procs.wait_for(
        lambda: _bound_pods(k, "topoplace-webhook"),
        "a topoplace-webhook pod bound by kube-scheduler",
    )
    pod = sorted(pods.values())[0]
    kubeconfig = _token_kubeconfig(cp, k, "topoplace-webhook", pod, "webhook-certs")
    root = cp.state / "webhook"
    volumes = {"tls": root / "tls", "policies": root / "policies", "tmp": root / "tmp"}
    for path in volumes.values():
        path.mkdir(parents=True, exist_ok=True)
    fields = {"metadata.namespace": NAMESPACE, "metadata.name": pod}
    started: dict[str, dict[str, Any]] = {}

    # The kubelet's part: the policies ConfigMap volume, kept current.
    config_map = next(v["configMap"]["name"] for v in spec["volumes"] if v["name"] == "policies")
    started["projector"] = _start(
        cp,
        "projector",
        [
            sys.executable,
            "-m",
            "e2e.topoplace.projector",
            f"--kubeconfig={cp.admin_kubeconfig}",
            f"--namespace={NAMESPACE}",
            f"--name={config_map}",
            f"--dir={volumes['policies']}",
        ],
        {},
    )
    procs.wait_for(
        lambda: (volumes["policies"] / "..data").is_symlink(),
        f"ConfigMap {config_map} projected",
        watch=lambda: procs.check_alive(cp.state, "projector"),
    )

    certs = local_container(
        spec,
        "certs",
        volumes=volumes,
        fields=fields,
        executables=EXECUTABLES,
        extra_args=_token_args(spec, "certs", kubeconfig),
    )
    started["webhook-certs"] = _start(cp, "webhook-certs", certs.argv, certs.env)
    # The sidecar's startupProbe: `serve` starts once the key pair is on the shared volume.
    crt = volumes["tls"] / "tls.crt"
    procs.wait_for(
        lambda: crt.exists() and crt.stat().st_size > 0,
        f"{crt} (certs sidecar)",
        watch=lambda: procs.check_alive(cp.state, "webhook-certs"),
    )

    # Every pod has its own network namespace; here they share the host's, so loopback only.
    serve = local_container(
        spec,
        "serve",
        volumes=volumes,
        fields=fields,
        executables=EXECUTABLES,
        extra_args=["--host=127.0.0.1", *_token_args(spec, "serve", kubeconfig)],
    )
    started["webhook-serve"] = _start(cp, "webhook-serve", serve.argv, serve.env)
    wait_webhook_ready(cp)
    procs.wait_for(
        lambda: k.json("get", "mutatingwebhookconfiguration", "topoplace-webhook")["webhooks"][0][
            "clientConfig"
        ].get("caBundle"),
        "caBundle of MutatingWebhookConfiguration topoplace-webhook (certs sidecar)",
    )
    say(f"webhook serving as pod {pod} would (certs sidecar wrote the Secret and caBundle)")
    return started


def start_claim_templates(
    cp: ControlPlane, k: Kubectl, objects: list[dict[str, Any]], say: Say
) -> dict[str, dict[str, Any]]:
    """The DRA template reconciler, a Deployment of its own, with its pod's bound token."""
    name = "topoplace-claim-templates"
    spec = pod_spec_of(objects, "Deployment", name)
    pods = procs.wait_for(lambda: _bound_pods(k, name), f"a {name} pod bound by kube-scheduler")
    pod = sorted(pods.values())[0]
    kubeconfig = _token_kubeconfig(cp, k, spec["serviceAccountName"], pod, "claim-templates")
    # Same ConfigMap as the webhook's: the one projected directory serves both here.
    volumes = {"policies": cp.state / "webhook" / "policies", "tmp": cp.state / "claims-tmp"}
    volumes["tmp"].mkdir(exist_ok=True)
    fields = {"metadata.namespace": NAMESPACE, "metadata.name": pod}
    port = procs.free_port()
    reconciler = local_container(
        spec,
        "claim-templates",
        volumes=volumes,
        fields=fields,
        executables=EXECUTABLES,
        extra_args=[
            "--host=127.0.0.1",
            f"--health-port={port}",
            *_token_args(spec, "claim-templates", kubeconfig),
        ],
    )
    started = {"claim-templates": _start(cp, "claim-templates", reconciler.argv, reconciler.env)}
    started["claim-templates"]["health_port"] = port
    procs.wait_for(
        lambda: get_url(f"http://127.0.0.1:{port}/readyz"),
        "claim-templates /readyz (templates match the policies)",
        watch=lambda: procs.check_alive(cp.state, "claim-templates"),
    )
    say(f"DRA claim-template reconciler running as pod {pod} would")
    return started


def wait_webhook_ready(cp: ControlPlane) -> None:
    procs.wait_for(
        lambda: get_url("https://127.0.0.1:8443/readyz", verify=False).strip(),
        "topoplace-webhook serve /readyz on 127.0.0.1:8443",
        watch=lambda: procs.check_alive(cp.state, "webhook-serve"),
    )


def start_agents(
    cp: ControlPlane,
    k: Kubectl,
    objects: list[dict[str, Any]],
    node_paths: dict[str, Any],
    say: Say,
) -> dict[str, dict[str, Any]]:
    spec = pod_spec_of(objects, "DaemonSet", "topoplace-agent")
    pods = procs.wait_for(
        lambda: (b := _bound_pods(k, "topoplace-agent")).keys() >= node_paths.keys() and b,
        "a topoplace-agent pod on every node (DaemonSet controller, kube-scheduler)",
    )
    started: dict[str, dict[str, Any]] = {}
    for node, paths in node_paths.items():
        pod = pods[node]
        kubeconfig = _token_kubeconfig(cp, k, "topoplace-agent", pod, f"agent-{node}")
        tmp = cp.state / "nodes" / node / "tmp"
        tmp.mkdir(exist_ok=True)
        volumes = _agent_volumes(spec, paths, tmp)
        fields = {"spec.nodeName": node, "metadata.namespace": NAMESPACE, "metadata.name": pod}
        prepare = local_container(
            spec, "prepare-cache", volumes=volumes, fields=fields, executables=EXECUTABLES
        )
        # The DaemonSet's init container: hand the cache root to the prefetchers' user.
        rc = procs.run_once(
            cp.state, f"prepare-cache-{node}", prepare.argv, env=prepare.env, cwd=REPO
        )
        if rc != 0:
            raise RuntimeError(
                f"prepare-cache for {node} exited {rc}\n"
                f"{procs.log_tail(cp.state, f'prepare-cache-{node}')}"
            )
        port = procs.free_port()
        paths["metrics_port"] = port
        agent = local_container(
            spec,
            "agent",
            volumes=volumes,
            fields=fields,
            executables=EXECUTABLES,
            extra_args=[
                f"--kubeconfig={kubeconfig}",
                f"--metrics-port={port}",
                "--metrics-host=127.0.0.1",
                # Pods mount the cache at its host path; this agent sees it at the fixture's.
                f"--dataset-host-root={DEFAULT_CACHE_ROOT}",
            ],
        )
        started[f"agent-{node}"] = _start(cp, f"agent-{node}", agent.argv, agent.env)
    for node, paths in node_paths.items():
        wait_agent_ready(cp, node, paths["metrics_port"])
    say(f"agents running for {len(node_paths)} nodes, each with a token bound to its pod")
    return started


def _agent_volumes(spec: dict[str, Any], paths: dict[str, Any], tmp: Path) -> dict[str, Path]:
    """Where each of the DaemonSet's volumes lives for this node, as its kubelet mounts them.

    The kubelet sees the node's own /var/lib and /var/log (and the dataset cache) through
    bind mounts; a hostPath maps to the host directory behind the mount it falls under.
    /sys is the machine's sysfs tree.
    """
    host = Path(paths["host_root"])
    binds = {
        "/sys": Path(paths["sysfs"]),
        str(DEFAULT_CACHE_ROOT): Path(paths["datasets"]),
        "/var/lib": host / "var" / "lib",
        "/var/log": host / "var" / "log",
    }
    out: dict[str, Path] = {}
    for volume in spec.get("volumes", []):
        if "hostPath" in volume:
            path = volume["hostPath"]["path"]
            under = [b for b in binds if path == b or path.startswith(b + "/")]
            if under:
                bind = max(under, key=len)
                out[volume["name"]] = binds[bind] / path[len(bind) :].lstrip("/")
            else:  # nothing of the simulated machine there: an empty directory of the node
                out[volume["name"]] = host / "rootfs" / path.lstrip("/")
                out[volume["name"]].mkdir(parents=True, exist_ok=True)
        elif "emptyDir" in volume:
            out[volume["name"]] = tmp
    return out


def wait_agent_ready(cp: ControlPlane, node: str, port: int) -> None:
    procs.wait_for(
        lambda: get_url(f"http://127.0.0.1:{port}/readyz"),
        f"agent of {node} /readyz (first reconcile done)",
        timeout=60,
        watch=lambda: procs.check_alive(cp.state, f"agent-{node}"),
    )
