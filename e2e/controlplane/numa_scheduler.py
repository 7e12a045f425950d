"""`topoplace-numa-scheduler` in `make cluster`: the stock kube-scheduler binary with the
KubeSchedulerConfiguration of manifests/overlays/numa-scheduler, run as a host process beside
the default scheduler once Topoplace is installed (it needs the webhook's CA).

Only what cannot run here changes: the kubeconfig (the scheduler's client certificate, user
system:kube-scheduler, instead of a ServiceAccount token), the CA file (the webhook's CA from
the MutatingWebhookConfiguration's caBundle, where the pod would mount the Secret's ca.crt),
and the serving address. The extender URL stays the Service's name: the scheduler's HTTPS
goes through the control plane's service proxy (HTTPS_PROXY), which joins it to a Ready
webhook pod as kube-proxy would. The overlay's Lease Role is applied and bound to the
scheduler's user, so leader election renews the Lease the webhook reads.
"""

from __future__ import annotations

import base64
from pathlib import Path
from typing import Any

import yaml

from e2e import procs
from e2e.controlplane.start import ControlPlane
from e2e.kube import Kubectl, get_url
from e2e.topoplace.install import Say

__all__ = ["NAME", "OVERLAY_OBJECTS", "overlay_flags", "overlay_objects", "start_numa_scheduler"]

NAME = "topoplace-numa-scheduler"
REPO = Path(__file__).resolve().parents[2]
OVERLAY_OBJECTS = REPO / "manifests" / "overlays" / "numa-scheduler" / "scheduler.yaml"
_USER = "system:kube-scheduler"  # the CN of the scheduler's client certificate (pki.py)
# Flags of the overlay's container that are about the pod, not the scheduling.
_POD_ONLY = ("--config=", "--bind-address=", "--secure-port=")


def overlay_objects() -> dict[tuple[str, str], dict[str, Any]]:
    docs = [d for d in yaml.safe_load_all(OVERLAY_OBJECTS.read_text()) if d]
    return {(d["kind"], d["metadata"]["name"]): d for d in docs}


def _config(objects: dict[tuple[str, str], Any], kubeconfig: Path, ca: Path) -> dict[str, Any]:
    config = yaml.safe_load(objects[("ConfigMap", NAME)]["data"]["config.yaml"])
    config["clientConnection"] = {"kubeconfig": str(kubeconfig)}
    for extender in config["extenders"]:
        extender["tlsConfig"]["caFile"] = str(ca)
    return config


def overlay_flags(objects: dict[tuple[str, str], Any]) -> list[str]:
    (container,) = objects[("Deployment", NAME)]["spec"]["template"]["spec"]["containers"]
    return [a for a in container["command"][1:] if not a.startswith(_POD_ONLY)]


def _lease_access(k: Kubectl, objects: dict[tuple[str, str], Any]) -> None:
    role = objects[("Role", f"{NAME}-lease")]
    binding = objects[("RoleBinding", f"{NAME}-lease")]
    user = {"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": _USER}
    k.apply([role, {**binding, "subjects": [user]}])


def start_numa_scheduler(cp: ControlPlane, k: Kubectl, say: Say) -> None:
    state = cp.state
    objects = overlay_objects()
    webhook = k.json("get", "mutatingwebhookconfiguration", "topoplace-webhook")
    ca = state / "pki" / "topoplace-webhook-ca.crt"
    ca.write_bytes(base64.b64decode(webhook["webhooks"][0]["clientConfig"]["caBundle"]))
    kubeconfig = state / "kubeconfigs" / "kube-scheduler.kubeconfig"
    config_file = state / f"{NAME}.yaml"
    config_file.write_text(yaml.safe_dump(_config(objects, kubeconfig, ca)))
    _lease_access(k, objects)
    port = procs.free_port()
    proxy = {key: cp.pod_env[key] for key in ("HTTPS_PROXY", "NO_PROXY")}
    procs.start(
        state,
        NAME,
        [
            str(cp.bin / "kube-scheduler"),
            f"--config={config_file}",
            "--bind-address=127.0.0.1",
            f"--secure-port={port}",
            *overlay_flags(objects),
        ],
        env=proxy,
    )
    procs.wait_for(
        lambda: get_url(f"https://127.0.0.1:{port}/healthz", verify=False).strip() == "ok",
        f"{NAME} /healthz",
        timeout=60,
        watch=lambda: procs.check_alive(state, NAME),
    )
    procs.wait_for(
        lambda: k.run("get", "lease", NAME, "-n", "kube-system").returncode == 0,
        f"{NAME} holding Lease kube-system/{NAME}",
        timeout=60,
        watch=lambda: procs.check_alive(state, NAME),
    )
    say(f"{NAME} healthy, leader, calling the webhook's extender through its Service")
