"""The claim-templates Deployment runs the command the way the code expects: its flags parse,
it reads the same policies ConfigMap as `serve`, one writer at a time, probes on its port."""

from __future__ import annotations

from typing import Any

import pytest

from tests.manifests.rendered import Rendering, render
from tests.manifests.test_consistency import container, mount_of, parse, pod_spec

NAME = "topoplace-claim-templates"


@pytest.fixture(scope="module")
def base() -> Rendering:
    return render()


def deployment(r: Rendering) -> dict[str, Any]:
    return r.one("Deployment", NAME)


def test_flags_parse_and_the_policies_are_the_webhooks(base: Rendering) -> None:
    spec = pod_spec(base, "Deployment", NAME)
    c = container(spec, "claim-templates")
    args = parse("webhook.cli.claim_templates", c, {})
    mount, volume = mount_of(spec, c, str(args.policies))
    assert mount["mountPath"] == str(args.policies) and "subPath" not in mount
    serve_spec = pod_spec(base, "Deployment", "topoplace-webhook")
    serve = container(serve_spec, "serve")
    serve_args = parse("webhook.cli.serve", serve, {})
    _, serve_volume = mount_of(serve_spec, serve, str(serve_args.policies))
    assert volume["configMap"] == serve_volume["configMap"]
    assert args.kubeconfig is None  # in-cluster: the projected token


def test_one_writer_at_a_time(base: Rendering) -> None:
    spec = deployment(base)["spec"]
    assert spec["replicas"] == 1 and spec["strategy"] == {"type": "Recreate"}


def test_probes_reach_the_health_port(base: Rendering) -> None:
    c = container(pod_spec(base, "Deployment", NAME), "claim-templates")
    args = parse("webhook.cli.claim_templates", c, {})
    (port,) = c["ports"]
    assert port["containerPort"] == args.health_port and args.host == "0.0.0.0"
    assert c["livenessProbe"]["httpGet"]["port"] == port["name"]
    assert c["readinessProbe"]["httpGet"]["port"] == port["name"]


def test_its_service_account_is_bound_to_its_cluster_role_only(base: Rendering) -> None:
    assert pod_spec(base, "Deployment", NAME)["serviceAccountName"] == NAME
    bindings = [
        b
        for b in base.all("RoleBinding") + base.all("ClusterRoleBinding")
        if any(s["name"] == NAME for s in b["subjects"])
    ]
    assert [(b["kind"], b["roleRef"]["name"]) for b in bindings] == [("ClusterRoleBinding", NAME)]
