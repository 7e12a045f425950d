"""The Helm chart on the real cluster: it lints, renders what kustomize renders (default
values and each overlay's), refuses bad values at `helm install` naming the key, and a
release installs, upgrades to fail-closed and uninstalls leaving nothing of its own.

How a release fits this cluster: `make cluster` applies e2e/overlays/base, the base plus
components. `helm install --take-ownership` adopts those objects: the manifests/components
among them become their overlays' chart values (charts/topoplace/ci), and the e2e-only
components post-render the chart (`e2e.helm.postrender`), so the release's objects are the
ones already there apart from Helm's labels: no pod restarts, and the webhook keeps serving
behind the same Service. After `helm uninstall`, the kustomize install is put back
(e2e/helm/restore.py) for the scenarios that follow.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from e2e import procs
from e2e.cluster import Cluster
from e2e.helm.restore import our_pods, reinstall
from e2e.helm.run import CHART, Helm, helm_binary
from e2e.kube import Kubectl
from tests.chart.compare import differences
from tests.e2e.helpers import REPO, training_pod
from tests.manifests.rendered import OVERLAYS, Rendering, overlay_values
from webhook.vocabulary import APPLIED_ANNOTATION

NAMESPACE = "topoplace-system"
RELEASE = "topoplace"
E2E_OVERLAYS = REPO / "e2e" / "overlays"
CLUSTER_SCOPED = (
    "clusterroles,clusterrolebindings,mutatingwebhookconfigurations,"
    "validatingadmissionpolicies,validatingadmissionpolicybindings"
)
NAMESPACED = (
    "deployments,daemonsets,services,configmaps,serviceaccounts,roles,rolebindings,"
    "poddisruptionbudgets,secrets"
)
PART_OF = "app.kubernetes.io/part-of=topoplace"


@pytest.fixture(scope="module")
def helm(cluster: Cluster) -> Helm:
    binary = helm_binary()
    if binary is None:
        pytest.fail("no helm binary: `make e2e-bin` builds it (make e2e does)")
    home = cluster.state / "helm"
    home.mkdir(exist_ok=True)
    return Helm(binary, home, cluster.kubeconfig)


def as_cluster_has_it(kubectl: Kubectl) -> list[str]:
    """Helm flags for what `make cluster` applied (e2e/overlays/base): the values of each
    manifests/components entry (its overlay's), and a post-renderer for e2e's own."""
    overlay = E2E_OVERLAYS / "base"
    kustomization = yaml.safe_load((overlay / "kustomization.yaml").read_text())
    assert kustomization["resources"] == ["../../../manifests/base"], kustomization
    values, post = [], []
    for entry in kustomization.get("components", []):
        component = (overlay / entry).resolve()
        if component.name == "noderesourcetopology-crd":
            continue  # no value: the chart's crds/ always holds the CRD
        if component.parent == REPO / "manifests" / "components":
            values.append(f"--values={overlay_values(component.name)}")
        else:
            post.append(str(component))
    if not post:
        return values
    argv = ["-m", "e2e.helm.postrender", str(kubectl.binary), *post]
    return [
        *values,
        f"--post-renderer={sys.executable}",
        *(f"--post-renderer-args={a}" for a in argv),
    ]


def objects(text: str) -> Rendering:
    return Rendering(tuple(d for d in yaml.safe_load_all(text) if d))


def kustomize(kubectl: Kubectl, target: Path) -> Rendering:
    return objects(kubectl("kustomize", str(target)))


def template(helm: Helm, *args: str) -> Rendering:
    # --include-crds: crds/ holds the NodeResourceTopology CRD the kustomize install has too.
    return objects(
        helm("template", RELEASE, str(CHART), f"--namespace={NAMESPACE}", "--include-crds", *args)
    )


@pytest.mark.parametrize("values", [None, *(overlay_values(o) for o in OVERLAYS)])
def test_the_chart_lints_strictly(helm: Helm, values: Path | None) -> None:
    args = [f"--values={values}"] if values else []
    done = helm.run("lint", "--strict", str(CHART), f"--namespace={NAMESPACE}", *args)
    assert "0 chart(s) failed" in done.stdout, done.stdout


@pytest.mark.parametrize("overlay", ["", *OVERLAYS])
def test_the_chart_renders_what_kustomize_renders(
    helm: Helm, kubectl: Kubectl, overlay: str
) -> None:
    """Default values = manifests/; each overlay's values (charts/topoplace/ci) = the overlay."""
    args = [f"--values={overlay_values(overlay)}"] if overlay else []
    target = REPO / "manifests" / "overlays" / overlay if overlay else REPO / "manifests"
    assert differences(kustomize(kubectl, target), template(helm, *args)) == []


def test_the_comparison_sees_a_difference(helm: Helm, kubectl: Kubectl) -> None:
    found = differences(
        kustomize(kubectl, REPO / "manifests"),
        template(helm, f"--values={overlay_values('fail-closed')}"),
    )
    assert found == [
        "MutatingWebhookConfiguration topoplace-webhook.webhooks[0].failurePolicy: "
        "kustomize 'Ignore', helm 'Fail'"
    ]


def failed_install(helm: Helm, kubectl: Kubectl, *args: str) -> str:
    """stderr of a `helm install` that must fail, having changed nothing on the cluster."""
    before = kubectl.json("get", "mutatingwebhookconfiguration", "topoplace-webhook")
    done = helm.run(
        "install", "refused", str(CHART), f"--namespace={NAMESPACE}", *args, check=False
    )
    assert done.returncode != 0, done.stdout
    releases = json.loads(helm("list", "--all", f"--namespace={NAMESPACE}", "--output=json"))
    assert [r["name"] for r in releases if r["name"] == "refused"] == []
    after = kubectl.json("get", "mutatingwebhookconfiguration", "topoplace-webhook")
    assert after["metadata"]["resourceVersion"] == before["metadata"]["resourceVersion"]
    return done.stderr


def test_install_refuses_values_that_break_the_schema_naming_the_key(
    helm: Helm, kubectl: Kubectl
) -> None:
    stderr = failed_install(helm, kubectl, "--set=webhook.failurePolicy=Sometimes")
    assert "at '/webhook/failurePolicy'" in stderr, stderr
    stderr = failed_install(helm, kubectl, "--set=agent.tolerations=everything")
    assert "at '/agent/tolerations'" in stderr, stderr


def test_install_refuses_an_inline_policy_that_is_not_a_valid_policy(
    helm: Helm, kubectl: Kubectl, tmp_path: Path
) -> None:
    policy = {
        "apiVersion": "topoplace.io/v1alpha1",
        "kind": "PlacementPolicy",
        "metadata": {"name": "ddp"},
        "spec": {"placement": {"gpuNicLink": "FAST"}, "launcher": {"numaBindin": "node"}},
    }
    values = tmp_path / "values.yaml"
    values.write_text(yaml.safe_dump({"policies": {"inline": [policy]}}))
    stderr = failed_install(helm, kubectl, f"--values={values}")
    assert "at '/policies/inline/0/spec/launcher': additional properties 'numaBindin'" in stderr
    assert "at '/policies/inline/0/spec/placement/gpuNicLink'" in stderr, stderr
    stderr = failed_install(helm, kubectl, "--set=policies.inline=ddp.yaml")
    assert "at '/policies/inline': got string, want array" in stderr, stderr


def pod_uids(kubectl: Kubectl) -> dict[str, str]:
    pods = kubectl.json("get", "pods", "-n", NAMESPACE)
    return {p["metadata"]["name"]: p["metadata"]["uid"] for p in pods["items"]}


def webhook_config(kubectl: Kubectl) -> dict[str, Any]:
    webhooks = kubectl.json("get", "mutatingwebhookconfiguration", "topoplace-webhook")["webhooks"]
    return dict(webhooks[0])


def mutated(create: Callable[..., Any], namespace: str, name: str) -> str:
    stored = json.loads(create(training_pod(name, "single-numa-partial", 2), namespace).stdout)
    return str(stored["metadata"].get("annotations", {}).get(APPLIED_ANNOTATION, ""))


def leftovers(kubectl: Kubectl) -> list[str]:
    """Objects labelled as Topoplace's, cluster-wide and in its namespace."""
    names = kubectl("get", CLUSTER_SCOPED, "-l", PART_OF, "-o", "name").split()
    names += kubectl("get", NAMESPACED, "-n", NAMESPACE, "-l", PART_OF, "-o", "name").split()
    return names


@pytest.fixture
def release(cluster: Cluster, helm: Helm) -> Iterator[None]:
    """Whatever the scenario leaves, the kustomize install is back afterwards."""
    yield
    if helm.run("status", RELEASE, f"--namespace={NAMESPACE}", check=False).returncode == 0:
        helm("uninstall", RELEASE, f"--namespace={NAMESPACE}", "--wait", "--timeout=120s")
    reinstall(cluster, say=lambda text: print(f"[restore] {text}"))


def test_install_adopts_upgrade_fails_closed_uninstall_leaves_nothing(
    helm: Helm,
    kubectl: Kubectl,
    namespace: str,
    create: Callable[..., Any],
    release: None,
) -> None:
    # What the release will apply is what `make cluster` applied, apart from Helm's labels.
    rendered = template(helm, *as_cluster_has_it(kubectl))
    assert differences(kustomize(kubectl, E2E_OVERLAYS / "base"), rendered) == []
    pods_before = pod_uids(kubectl)

    notes = helm(
        "install", RELEASE, str(CHART), f"--namespace={NAMESPACE}", "--take-ownership",
        *as_cluster_has_it(kubectl),
    )  # fmt: skip
    # NOTES.txt: how to opt a pod in and ask explain; no warning, the namespace is labelled.
    assert "topoplace.io/policy: <policy-name>" in notes, notes
    assert "kubectl topoplace explain pod.yaml" in notes, notes
    assert "WARNING" not in notes, notes
    manifest = objects(helm("get", "manifest", RELEASE, f"--namespace={NAMESPACE}"))
    # crds/ is installed beside a release, never part of it: `get manifest` lists no CRD.
    in_release = [o for o in rendered.objects if o["kind"] != "CustomResourceDefinition"]
    assert len(manifest.objects) == len(in_release)
    for obj in manifest.objects:
        kind, name = obj["kind"].lower(), obj["metadata"]["name"]
        namespace_of = obj["metadata"].get("namespace")  # a Role may live in kube-system
        scope = ["-n", namespace_of] if namespace_of else []
        live = kubectl.json("get", kind, name, *scope)["metadata"]
        assert live["annotations"]["meta.helm.sh/release-name"] == RELEASE, f"{kind}/{name}"
        assert live["labels"]["app.kubernetes.io/managed-by"] == "Helm", f"{kind}/{name}"
    assert pod_uids(kubectl) == pods_before  # adopted in place: no pod restarted
    assert webhook_config(kubectl)["clientConfig"].get("caBundle")  # the sidecar's, kept
    assert mutated(create, namespace, "after-install").startswith("single-numa-partial@")

    assert webhook_config(kubectl)["failurePolicy"] == "Ignore"
    helm(
        "upgrade", RELEASE, str(CHART), f"--namespace={NAMESPACE}", "--reuse-values",
        "--set=webhook.failurePolicy=Fail", *as_cluster_has_it(kubectl),
    )  # fmt: skip
    config = webhook_config(kubectl)
    assert config["failurePolicy"] == "Fail"
    assert config["clientConfig"].get("caBundle")  # three-way merge keeps what Helm never set
    assert pod_uids(kubectl) == pods_before
    assert mutated(create, namespace, "after-upgrade").startswith("single-numa-partial@")

    assert leftovers(kubectl)  # the check below can see our objects
    helm("uninstall", RELEASE, f"--namespace={NAMESPACE}", "--wait", "--timeout=120s")
    for obj in manifest.objects:
        kind, name = obj["kind"].lower(), obj["metadata"]["name"]
        namespace_of = obj["metadata"].get("namespace")
        scope = ["-n", namespace_of] if namespace_of else []
        gone = kubectl.run("get", kind, name, *scope, check=False)
        assert gone.returncode != 0 and "NotFound" in gone.stderr, f"{kind}/{name} left"
    assert leftovers(kubectl) == []
    procs.wait_for(lambda: not our_pods(kubectl), "the release's pods deleted", timeout=120)
    history = kubectl("get", "secrets", "-n", NAMESPACE, "-l", f"owner=helm,name={RELEASE}")
    assert history.strip() == "" or "No resources" in history
    # What stays is what Topoplace made at run time, as after `kubectl delete -k`: the certs
    # sidecar's key pair (docs/install.md: delete the namespace to remove it).
    secrets = kubectl.json("get", "secrets", "-n", NAMESPACE)["items"]
    assert [s["metadata"]["name"] for s in secrets] == ["topoplace-webhook-tls"]
