"""The rendered manifests agree with the code they deploy: flags parse with the real
parsers, names and paths line up across objects, label keys come from the vocabularies."""

from __future__ import annotations

import argparse
import importlib
import posixpath
from typing import Any

import pytest
import yaml

from common.cache_layout import CACHE_OWNER, DEFAULT_CACHE_ROOT
from common.cli.subcommands import add_logging_arguments
from tests.manifests.rendered import REPO, Rendering, render
from webhook.certs.bootstrap import service_dns_names
from webhook.vocabulary import POLICY_LABEL
from webhook.workloads.mutation import WORKLOAD_KINDS


@pytest.fixture(scope="module")
def base() -> Rendering:
    return render()


def pod_spec(r: Rendering, kind: str, name: str) -> dict[str, Any]:
    return r.one(kind, name)["spec"]["template"]["spec"]


def container(spec: dict[str, Any], name: str) -> dict[str, Any]:
    for c in (spec.get("initContainers") or []) + spec["containers"]:
        if c["name"] == name:
            return c
    raise LookupError(name)


def webhook_pod(r: Rendering) -> dict[str, Any]:
    return pod_spec(r, "Deployment", "topoplace-webhook")


def agent_pod(r: Rendering) -> dict[str, Any]:
    return pod_spec(r, "DaemonSet", "topoplace-agent")


def parse(module: str, c: dict[str, Any], env: dict[str, str]) -> argparse.Namespace:
    """Parse a container's args with the subcommand's real parser, expanding $(VAR) as the
    kubelet does. An unknown or malformed flag fails here, as it would in the pod."""
    assert c["command"] in (["topoplace-webhook"], ["topoplace-agent"])
    args = list(c["args"])
    for key, value in env.items():
        args = [a.replace(f"$({key})", value) for a in args]
    parser = argparse.ArgumentParser(exit_on_error=False)
    add_logging_arguments(parser)
    importlib.import_module(module).add_arguments(parser)
    assert args[0].replace("-", "_") == module.rsplit(".", 1)[1]
    return parser.parse_args(args[1:])


def mount_of(spec: dict[str, Any], c: dict[str, Any], path: str) -> tuple[dict, dict]:
    """The volumeMount holding `path` in container `c`, and its volume."""
    best = max(
        (m for m in c.get("volumeMounts") or [] if (path + "/").startswith(m["mountPath"] + "/")),
        key=lambda m: len(m["mountPath"]),
        default=None,
    )
    assert best is not None, f"{path} is not on any volume of container {c['name']}"
    volume = next(v for v in spec["volumes"] if v["name"] == best["name"])
    return best, volume


# --- webhook --------------------------------------------------------------------------------


def test_webhook_args_parse_with_the_real_parsers(base: Rendering) -> None:
    spec = webhook_pod(base)
    serve = parse("webhook.cli.serve", container(spec, "serve"), {})
    certs = parse("webhook.cli.certs", container(spec, "certs"), {"POD_NAMESPACE": "ns"})
    assert serve.policies and serve.tls_cert and certs.out_dir


def hooks(r: Rendering) -> dict[str, dict[str, Any]]:
    return {h["name"]: h for h in r.one("MutatingWebhookConfiguration")["webhooks"]}


def test_object_selector_is_the_label_the_webhook_reads(base: Rendering) -> None:
    hook = hooks(base)["pods.topoplace.io"]
    assert hook["objectSelector"] == {
        "matchExpressions": [{"key": POLICY_LABEL, "operator": "Exists"}]
    }


@pytest.mark.parametrize(
    "name", ["pods.topoplace.io", "workloads.topoplace.io", "podgroups.topoplace.io"]
)
def test_webhook_never_intercepts_its_own_namespace_or_kube_system(
    base: Rendering, name: str
) -> None:
    hook = hooks(base)[name]
    own_namespace = base.one("Deployment", "topoplace-webhook")["metadata"]["namespace"]
    (expr,) = hook["namespaceSelector"]["matchExpressions"]
    assert expr["key"] == "kubernetes.io/metadata.name"
    assert expr["operator"] == "NotIn"
    assert {own_namespace, "kube-system"} <= set(expr["values"])


def test_webhook_configuration_is_the_documented_one(base: Rendering) -> None:
    hook = hooks(base)["pods.topoplace.io"]
    assert hook["rules"] == [
        {
            "operations": ["CREATE"],
            "apiGroups": [""],
            "apiVersions": ["v1"],
            "resources": ["pods"],
            "scope": "Namespaced",
        }
    ]
    assert hook["sideEffects"] == "None"
    assert hook["admissionReviewVersions"] == ["v1"]
    assert hook["reinvocationPolicy"] == "IfNeeded"
    assert hook["failurePolicy"] == "Ignore"
    assert hook["matchPolicy"] == "Equivalent"
    assert 1 <= hook["timeoutSeconds"] <= 10
    assert "caBundle" not in hook["clientConfig"]  # the certs sidecar owns it


def test_workload_rules_are_the_kinds_the_webhook_mutates(base: Rendering) -> None:
    """Every kind the webhook mutates at CREATE has a rule, and no rule sends another kind."""
    hook = hooks(base)["workloads.topoplace.io"]
    ruled = {
        (group, resource)
        for rule in hook["rules"]
        for group in rule["apiGroups"]
        for resource in rule["resources"]
    }
    assert all(rule["operations"] == ["CREATE"] for rule in hook["rules"])
    # kind -> resource as the API server names it: lowercase plural.
    assert ruled == {(group, kind.lower() + "s") for group, kind in WORKLOAD_KINDS}
    assert "objectSelector" not in hook  # it would see the workload's labels, not templates'
    assert hook["failurePolicy"] == "Ignore"
    assert hook["reinvocationPolicy"] == "IfNeeded"
    assert hook["sideEffects"] == "None" and hook["admissionReviewVersions"] == ["v1"]
    assert hook["clientConfig"] == hooks(base)["pods.topoplace.io"]["clientConfig"]


def test_service_reaches_the_serve_port(base: Rendering) -> None:
    hook = hooks(base)["pods.topoplace.io"]
    ref = hook["clientConfig"]["service"]
    service = base.one("Service", ref["name"])
    assert service["metadata"]["namespace"] == ref["namespace"]
    (port,) = [p for p in service["spec"]["ports"] if p["port"] == ref["port"]]
    deployment = base.one("Deployment", "topoplace-webhook")
    labels = deployment["spec"]["template"]["metadata"]["labels"]
    assert service["spec"]["selector"].items() <= labels.items()
    serve = container(webhook_pod(base), "serve")
    (target,) = [p for p in serve["ports"] if port["targetPort"] in (p["name"], p["containerPort"])]
    assert target["containerPort"] == parse("webhook.cli.serve", serve, {}).port


def test_metrics_port_is_exposed_where_serve_listens(base: Rendering) -> None:
    service = base.one("Service", "topoplace-webhook")
    serve = container(webhook_pod(base), "serve")
    (port,) = [p for p in service["spec"]["ports"] if p["name"] == "metrics"]
    (target,) = [p for p in serve["ports"] if p["name"] == port["targetPort"]]
    assert target["containerPort"] == parse("webhook.cli.serve", serve, {}).metrics_port


def test_policies_configmap_is_mounted_as_a_directory_at_the_policies_flag(
    base: Rendering,
) -> None:
    spec = webhook_pod(base)
    serve = container(spec, "serve")
    policies_dir = str(parse("webhook.cli.serve", serve, {}).policies)
    mount, volume = mount_of(spec, serve, policies_dir)
    assert mount["mountPath"] == policies_dir
    assert "subPath" not in mount and "subPathExpr" not in mount  # subPath never updates
    assert base.has("ConfigMap", volume["configMap"]["name"])


def test_policies_configmap_holds_every_policy_file_unhashed(base: Rendering) -> None:
    configmap = base.one("ConfigMap", "topoplace-policies")  # no hash suffix: hot reload
    files = sorted((REPO / "policies").glob("*.yaml"))
    assert sorted(configmap["data"]) == [f.name for f in files], (
        "policies/Kustomization must list every policies/*.yaml"
    )
    for f in files:
        assert configmap["data"][f.name] == f.read_text()


def test_certs_writes_where_serve_reads(base: Rendering) -> None:
    spec = webhook_pod(base)
    serve, certs = container(spec, "serve"), container(spec, "certs")
    served = parse("webhook.cli.serve", serve, {})
    written = parse("webhook.cli.certs", certs, {"POD_NAMESPACE": "ns"})
    out_dir = str(written.out_dir)
    assert str(served.tls_cert) == posixpath.join(out_dir, "tls.crt")
    assert str(served.tls_key) == posixpath.join(out_dir, "tls.key")
    _, serve_volume = mount_of(spec, serve, str(served.tls_cert))
    certs_mount, certs_volume = mount_of(spec, certs, posixpath.join(out_dir, "tls.crt"))
    assert serve_volume == certs_volume and "emptyDir" in serve_volume
    assert not certs_mount.get("readOnly", False)
    assert certs["restartPolicy"] == "Always"  # a native sidecar: keeps renewing
    # serve starts only after the sidecar's startup probe sees the certificate it will load
    assert certs["startupProbe"]["exec"]["command"] == ["test", "-s", str(served.tls_cert)]


def test_certs_names_match_the_objects_and_rbac(base: Rendering) -> None:
    spec = webhook_pod(base)
    certs = container(spec, "certs")
    args = parse("webhook.cli.certs", certs, {"POD_NAMESPACE": "topoplace-system"})
    (env,) = [e for e in certs["env"] if e["name"] == "POD_NAMESPACE"]
    assert env["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.namespace"
    assert base.has("Service", args.service)
    assert base.has("MutatingWebhookConfiguration", args.webhook_config)
    role = base.one("Role", "topoplace-webhook-certs")
    named = [r for r in role["rules"] if r.get("resourceNames")]
    assert all(r["resourceNames"] == [args.secret] for r in named)
    cluster_role = base.one("ClusterRole", "topoplace-webhook-certs")
    assert cluster_role["rules"][0]["resourceNames"] == [args.webhook_config]


def test_prefetch_image_is_the_image_being_deployed(base: Rendering) -> None:
    serve = container(webhook_pod(base), "serve")
    assert parse("webhook.cli.serve", serve, {}).prefetch_image == serve["image"]
    agent = container(agent_pod(base), "agent")
    assert agent["image"] == serve["image"]


def test_webhook_is_highly_available(base: Rendering) -> None:
    deployment = base.one("Deployment", "topoplace-webhook")
    assert deployment["spec"]["replicas"] == 2
    assert deployment["spec"]["strategy"]["rollingUpdate"]["maxUnavailable"] == 0
    (term,) = deployment["spec"]["template"]["spec"]["affinity"]["podAntiAffinity"][
        "preferredDuringSchedulingIgnoredDuringExecution"
    ]
    assert term["podAffinityTerm"]["topologyKey"] == "kubernetes.io/hostname"
    labels = deployment["spec"]["template"]["metadata"]["labels"]
    assert term["podAffinityTerm"]["labelSelector"]["matchLabels"].items() <= labels.items()
    pdb = base.one("PodDisruptionBudget", "topoplace-webhook")
    assert pdb["spec"]["minAvailable"] == 1
    assert pdb["spec"]["selector"]["matchLabels"].items() <= labels.items()


def test_dataset_cache_root_is_one_path_everywhere(base: Rendering) -> None:
    spec = agent_pod(base)
    agent = container(spec, "agent")
    args = parse("agent.cli.run", agent, {"NODE_NAME": "node-1"})
    mount, volume = mount_of(spec, agent, str(args.dataset_root))
    assert args.dataset_root == DEFAULT_CACHE_ROOT
    assert mount["mountPath"] == volume["hostPath"]["path"] == str(DEFAULT_CACHE_ROOT)
    assert volume["hostPath"]["type"] == "DirectoryOrCreate"
    serve = parse("webhook.cli.serve", container(webhook_pod(base), "serve"), {})
    assert serve.dataset_cache_root == DEFAULT_CACHE_ROOT


# --- agent ----------------------------------------------------------------------------------


def test_agent_labels_the_node_it_runs_on(base: Rendering) -> None:
    agent = container(agent_pod(base), "agent")
    assert parse("agent.cli.run", agent, {"NODE_NAME": "node-7"}).node_name == "node-7"
    (env,) = [e for e in agent["env"] if e["name"] == "NODE_NAME"]
    assert env["valueFrom"]["fieldRef"]["fieldPath"] == "spec.nodeName"


def test_agent_reaches_nvml_without_privileges(base: Rendering) -> None:
    spec = agent_pod(base)
    agent = container(spec, "agent")
    env = {e["name"]: e.get("value") for e in agent["env"]}
    assert env["NVIDIA_VISIBLE_DEVICES"] == "all"
    assert env["NVIDIA_DRIVER_CAPABILITIES"] == "utility"
    assert "runtimeClassName" not in spec  # not every cluster has one; see the overlay
    assert agent["securityContext"]["privileged"] is False


def test_agent_tolerates_gpu_taints_and_runs_on_linux(base: Rendering) -> None:
    spec = agent_pod(base)
    keys = {t["key"] for t in spec["tolerations"]}
    assert "nvidia.com/gpu" in keys
    (term,) = spec["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][
        "nodeSelectorTerms"
    ]
    assert {"key": "kubernetes.io/os", "operator": "In", "values": ["linux"]} in term[
        "matchExpressions"
    ]


def test_metrics_flag_matches_the_agents_probe_port(base: Rendering) -> None:
    agent = container(agent_pod(base), "agent")
    args = parse("agent.cli.run", agent, {"NODE_NAME": "n"})
    (port,) = agent["ports"]
    assert port["containerPort"] == args.metrics_port
    for probe in ("livenessProbe", "readinessProbe", "startupProbe"):
        assert agent[probe]["httpGet"]["port"] in (port["name"], port["containerPort"])


def test_policy_files_listed_in_the_generator_exist() -> None:
    kustomization = yaml.safe_load((REPO / "policies" / "Kustomization").read_text())
    (generator,) = kustomization["configMapGenerator"]
    for name in generator["files"]:
        assert (REPO / "policies" / name).is_file(), name
    assert kustomization["generatorOptions"]["disableNameSuffixHash"] is True


def test_service_dns_names_are_the_ones_the_api_server_dials(base: Rendering) -> None:
    hook = hooks(base)["pods.topoplace.io"]
    ref = hook["clientConfig"]["service"]
    # the API server verifies the certificate against <service>.<namespace>.svc
    assert service_dns_names(ref["name"], ref["namespace"])[0] == (
        f"{ref['name']}.{ref['namespace']}.svc"
    )


def test_webhook_drains_before_the_kubelet_kills_it(base: Rendering) -> None:
    """preStop keeps serving while endpoints update, then serve gets its shutdown timeout;
    both must fit in the grace period or in-flight admissions are cut (fail-open)."""
    spec = webhook_pod(base)
    serve_container = container(spec, "serve")
    drain = serve_container["lifecycle"]["preStop"]["sleep"]["seconds"]
    shutdown = parse("webhook.cli.serve", serve_container, {}).shutdown_timeout
    assert drain >= 3
    assert drain + shutdown < spec["terminationGracePeriodSeconds"]


def test_agent_prepare_cache_args_match_the_cache_the_agent_and_webhook_use(
    base: Rendering,
) -> None:
    spec = agent_pod(base)
    step = container(spec, "prepare-cache")
    parser = argparse.ArgumentParser(exit_on_error=False)
    add_logging_arguments(parser)
    importlib.import_module("agent.cli.prepare_cache").add_arguments(parser)
    assert step["args"][0] == "prepare-cache"
    prepared = parser.parse_args(step["args"][1:])
    agent = parse("agent.cli.run", container(spec, "agent"), {"NODE_NAME": "n"})
    served = parse("webhook.cli.serve", container(webhook_pod(base), "serve"), {})
    assert prepared.cache_root == agent.dataset_root == served.dataset_cache_root
    assert prepared.owner == CACHE_OWNER


def test_podgroups_come_only_labelled_and_never_fail_closed(base: Rendering) -> None:
    """PodGroups (scheduling.k8s.io/v1beta1) a user labels with a policy: CREATE only (the
    constraint is immutable after), only those with the label, never refused."""
    hook = hooks(base)["podgroups.topoplace.io"]
    assert hook["rules"] == [
        {
            "operations": ["CREATE"],
            "apiGroups": ["scheduling.k8s.io"],
            "apiVersions": ["v1beta1"],
            "resources": ["podgroups"],
            "scope": "Namespaced",
        }
    ]
    assert hook["objectSelector"] == {
        "matchExpressions": [{"key": POLICY_LABEL, "operator": "Exists"}]
    }
    assert hook["failurePolicy"] == "Ignore" and hook["sideEffects"] == "None"
