"""The real API server accepts the manifests: the base for real (make cluster applied it) and
every overlay with --dry-run=server, cert-manager's with cert-manager's own CRDs installed."""

from __future__ import annotations

from pathlib import Path

import pytest

from e2e import procs
from e2e.cluster import Cluster
from e2e.kube import Kubectl
from tests.e2e.helpers import REPO

OVERLAYS = sorted(p.name for p in (REPO / "manifests" / "overlays").iterdir() if p.is_dir())


def test_the_base_is_installed(kubectl: Kubectl) -> None:
    # What `kubectl apply -k manifests/` creates, read back from the API server.
    for kind, name in [
        ("daemonset", "topoplace-agent"),
        ("deployment", "topoplace-webhook"),
        ("configmap", "topoplace-policies"),
        ("secret", "topoplace-webhook-tls"),  # created by the certs sidecar, not by hand
    ]:
        kubectl("get", kind, name, "-n", "topoplace-system")
    for kind, name in [
        ("mutatingwebhookconfiguration", "topoplace-webhook"),
        ("validatingadmissionpolicy", "topoplace-agent-node-scope"),
    ]:
        kubectl("get", kind, name)


def test_the_base_applies_again_without_change(kubectl: Kubectl) -> None:
    # `kubectl diff` asks the server what applying again would change: nothing.
    done = kubectl.run("diff", "-k", str(REPO / "e2e" / "overlays" / "base"), check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    out = kubectl("apply", "-k", str(REPO / "e2e" / "overlays" / "base"), "--dry-run=server")
    # Only the PodDisruptionBudget, whose selector has patch strategy `replace`, is re-sent.
    configured = [line for line in out.splitlines() if " configured" in line]
    assert configured == [
        "poddisruptionbudget.policy/topoplace-webhook configured (server dry run)"
    ]


def _cert_manager_crds(cluster: Cluster) -> Path:
    found = sorted(cluster.bin.parent.glob("cert-manager-*-crds"))
    assert found, f"no cert-manager CRDs beside {cluster.bin}: run make e2e-bin"
    return found[-1]


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_every_overlay_is_accepted_by_the_server(
    cluster: Cluster, kubectl: Kubectl, overlay: str
) -> None:
    if overlay == "cert-manager":
        crds = sorted(_cert_manager_crds(cluster).glob("*.yaml"))
        kubectl("apply", "--server-side", *[f"--filename={f}" for f in crds])
        procs.wait_for(
            lambda: (
                "Established"
                in kubectl(
                    "get",
                    "crd",
                    "certificates.cert-manager.io",
                    "issuers.cert-manager.io",
                    "-o",
                    "jsonpath={.items[*].status.conditions[?(@.status=='True')].type}",
                )
            ),
            "cert-manager CRDs established",
        )
    done = kubectl.run(
        "apply",
        "-k",
        str(REPO / "manifests" / "overlays" / overlay),
        "--dry-run=server",
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert "(server dry run)" in done.stdout
