"""Each overlay changes the one thing it promises and leaves the base otherwise intact."""

from __future__ import annotations

from typing import Any

from tests.manifests.rendered import Rendering, render
from webhook.certs.bootstrap import service_dns_names


def _strip(r: Rendering, *kinds: str) -> list[dict[str, Any]]:
    return [o for o in r.objects if o["kind"] not in kinds]


def _agent_spec(r: Rendering) -> dict[str, Any]:
    return r.one("DaemonSet", "topoplace-agent")["spec"]["template"]["spec"]


def test_fail_closed_changes_only_the_failure_policy() -> None:
    base, closed = render(), render("overlays/fail-closed")
    hook, workloads, groups = closed.one("MutatingWebhookConfiguration")["webhooks"]
    assert hook["failurePolicy"] == "Fail"
    base_hook, base_workloads, base_groups = base.one("MutatingWebhookConfiguration")["webhooks"]
    assert {**hook, "failurePolicy": "Ignore"} == base_hook
    # Without an objectSelector, Fail would refuse every Job while the webhook is down.
    assert workloads == base_workloads and workloads["failurePolicy"] == "Ignore"
    # A PodGroup is no pod: without its constraint its pods are still scheduled.
    assert groups == base_groups and groups["failurePolicy"] == "Ignore"
    kinds = ("MutatingWebhookConfiguration",)
    assert _strip(closed, *kinds) == _strip(base, *kinds)


def test_gpu_nodes_only_narrows_the_agent_and_keeps_linux() -> None:
    (term,) = _agent_spec(render("overlays/gpu-nodes-only"))["affinity"]["nodeAffinity"][
        "requiredDuringSchedulingIgnoredDuringExecution"
    ]["nodeSelectorTerms"]
    keys = {e["key"] for e in term["matchExpressions"]}
    assert keys == {"kubernetes.io/os", "nvidia.com/gpu.present"}


def test_nvidia_runtime_class_sets_it_on_gpu_nodes_only() -> None:
    r = render("overlays/nvidia-runtime-class")
    spec = _agent_spec(r)
    assert spec["runtimeClassName"] == "nvidia"
    (term,) = spec["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][
        "nodeSelectorTerms"
    ]
    assert any(e["key"] == "nvidia.com/gpu.present" for e in term["matchExpressions"])


def test_cert_manager_replaces_the_bootstrap() -> None:
    r = render("overlays/cert-manager")
    deployment = r.one("Deployment", "topoplace-webhook")
    spec = deployment["spec"]["template"]["spec"]
    assert not spec.get("initContainers")  # no certs sidecar
    for kind in ("Role", "RoleBinding", "ClusterRole", "ClusterRoleBinding"):
        assert not r.has(kind, "topoplace-webhook-certs")
    assert r.has("ClusterRole", "topoplace-agent")  # the agent's RBAC stays

    mwc = r.one("MutatingWebhookConfiguration")
    namespace, name = mwc["metadata"]["annotations"]["cert-manager.io/inject-ca-from"].split("/")
    certificate = r.one("Certificate", name)
    assert certificate["metadata"]["namespace"] == namespace
    ref = mwc["webhooks"][0]["clientConfig"]["service"]
    assert service_dns_names(ref["name"], ref["namespace"])[0] in certificate["spec"]["dnsNames"]

    # serve reads the Certificate's Secret at the paths its flags name
    (serve,) = spec["containers"]
    (tls,) = [v for v in spec["volumes"] if v["name"] == "tls"]
    assert "emptyDir" not in tls
    assert tls["secret"]["secretName"] == certificate["spec"]["secretName"]
    (mount,) = [m for m in serve["volumeMounts"] if m["name"] == "tls"]
    files = {f"{mount['mountPath']}/{item['path']}" for item in tls["secret"]["items"]}
    assert {
        f"--tls-cert={mount['mountPath']}/tls.crt",
        f"--tls-key={mount['mountPath']}/tls.key",
    } <= set(serve["args"])
    assert files == {f"{mount['mountPath']}/tls.crt", f"{mount['mountPath']}/tls.key"}

    # the serving certificate is issued by a CA issuer, so renewals keep the caBundle
    issuer = r.one("Issuer", certificate["spec"]["issuerRef"]["name"])
    ca_certificate = r.one("Certificate", "topoplace-webhook-ca")
    assert issuer["spec"]["ca"]["secretName"] == ca_certificate["spec"]["secretName"]
    assert ca_certificate["spec"]["isCA"] is True
