"""The Helm chart rendered by the real `helm template` (skipped where helm is not built):
each value lands where values.yaml says, Helm's labels stay off pod templates, and bad values
fail naming what is wrong."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from e2e.helm.run import CHART
from tests.chart.compare import HELM_LABELS, without_helm_labels
from tests.manifests.rendered import ALL_VALUES, REPO, helm, render


def test_helm_labels_stay_off_pod_templates_and_selectors() -> None:
    """Adopting the kustomize objects or upgrading the release never restarts a pod for a
    label, and selectors (immutable) stay as the base writes them."""
    for obj in render("chart").objects:
        if obj["kind"] == "CustomResourceDefinition":
            continue  # from crds/: Helm installs those verbatim, never templated nor labelled
        labels = obj["metadata"]["labels"]
        if obj["kind"] == "CustomResourceDefinition":
            # crds/ is not templated and not part of the release: Helm installs it only where
            # absent and never manages it afterwards, so it carries no Helm label.
            assert "app.kubernetes.io/managed-by" not in labels
            assert labels["app.kubernetes.io/part-of"] == "topoplace"
            continue
        assert labels["app.kubernetes.io/managed-by"] == "Helm", obj["metadata"]["name"]
        assert labels["app.kubernetes.io/part-of"] == "topoplace"
        if obj["kind"] in ("Deployment", "DaemonSet"):
            template = obj["spec"]["template"]["metadata"]["labels"]
            assert not set(template) & set(HELM_LABELS), obj["metadata"]["name"]
            assert set(obj["spec"]["selector"]["matchLabels"]) == {"app.kubernetes.io/name"}


def _spec(r: Any, kind: str, name: str) -> dict[str, Any]:
    return dict(r.one(kind, name)["spec"])


def test_values_land_where_they_say() -> None:
    values = yaml.safe_load(ALL_VALUES.read_text())
    r = render("chart/all-values")
    image = f"{values['image']['repository']}:{values['image']['tag']}"
    for kind, name in [
        ("Deployment", "topoplace-webhook"),
        ("Deployment", "topoplace-claim-templates"),
        ("DaemonSet", "topoplace-agent"),
    ]:
        pod = _spec(r, kind, name)["template"]["spec"]
        for c in [*pod.get("initContainers", []), *pod["containers"]]:
            assert (c["image"], c["imagePullPolicy"]) == (image, "Always"), f"{name}/{c['name']}"
    webhook = _spec(r, "Deployment", "topoplace-webhook")
    assert webhook["replicas"] == 3
    (serve,) = [c for c in webhook["template"]["spec"]["containers"] if c["name"] == "serve"]
    assert f"--prefetch-image={image}" in serve["args"]  # injected prefetchers: same image
    assert serve["resources"] == values["webhook"]["resources"]
    agent_pod = _spec(r, "DaemonSet", "topoplace-agent")["template"]["spec"]
    assert agent_pod["nodeSelector"] == values["agent"]["nodeSelector"]
    assert agent_pod["tolerations"] == values["agent"]["tolerations"]
    (agent,) = [c for c in agent_pod["containers"] if c["name"] == "agent"]
    assert agent["resources"] == values["agent"]["resources"]
    metadata = values["agent"]["networkMetadata"]
    assert agent["args"][-3:] == [
        f"--network-metadata={metadata['provider']}",
        f"--network-metadata-endpoint={metadata['endpoint']}",
        f"--network-metadata-timeout={metadata['timeout']}",
    ]
    claims = _spec(r, "Deployment", "topoplace-claim-templates")["template"]["spec"]
    assert claims["containers"][0]["resources"] == values["claimTemplates"]["resources"]
    data = r.one("ConfigMap", "topoplace-policies")["data"]
    assert {k: yaml.safe_load(v) for k, v in data.items()} == {
        "ddp-team-a.yaml": values["policies"]["inline"][0]
    }


def _template(*args: str) -> subprocess.CompletedProcess[str]:
    return helm().run("template", "topoplace", str(CHART), *args, check=False)


def test_an_existing_policies_configmap_is_mounted_and_none_rendered() -> None:
    done = _template("--namespace=topoplace-system", "--set=policies.existingConfigMap=mine")
    assert done.returncode == 0, done.stderr
    objects = [d for d in yaml.safe_load_all(done.stdout) if d]
    assert not [o for o in objects if o["kind"] == "ConfigMap"]
    mounted = {
        v["configMap"]["name"]
        for o in objects
        if o["kind"] == "Deployment"
        for v in o["spec"]["template"]["spec"]["volumes"]
        if v["name"] == "policies"
    }
    assert mounted == {"mine"}


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--namespace=default"], 'release namespace "default"'),
        (
            [
                "--namespace=topoplace-system",
                "--set=policies.existingConfigMap=mine",
                f"--values={ALL_VALUES}",
            ],
            "policies.inline and policies.existingConfigMap",
        ),
        (
            ["--namespace=topoplace-system", "--set=webhook.replicas=two"],
            "at '/webhook/replicas': got string, want integer",
        ),
        (
            ["--namespace=topoplace-system", "--set=agent.gpuNodeOnly=true"],
            "at '/agent': additional properties 'gpuNodeOnly' not allowed",
        ),
        (
            ["--namespace=topoplace-system", "--set=agent.networkMetadata.provider=aws"],
            "at '/agent/networkMetadata/provider'",
        ),
        (
            ["--namespace=topoplace-system", "--set=agent.networkMetadata.timeout=60"],
            "at '/agent/networkMetadata/timeout'",
        ),
        (
            ["--namespace=topoplace-system", "--set=agent.networkMetadata.timeout=2"],
            "agent.networkMetadata.timeout need agent.networkMetadata.provider",
        ),
    ],
)
def test_bad_values_fail_naming_what_is_wrong(args: list[str], message: str) -> None:
    done = _template(*args)
    assert done.returncode != 0 and done.stdout == ""
    assert message in done.stderr, done.stderr


def test_two_inline_policies_with_one_name_fail(tmp_path: Path) -> None:
    policy = yaml.safe_load(ALL_VALUES.read_text())["policies"]["inline"][0]
    values = tmp_path / "twice.yaml"
    values.write_text(yaml.safe_dump({"policies": {"inline": [policy, policy]}}))
    done = _template("--namespace=topoplace-system", f"--values={values}")
    assert done.returncode != 0
    assert 'policies.inline[1]: metadata.name "ddp-team-a"' in done.stderr, done.stderr


def _agent_container(objects: Any) -> dict[str, Any]:
    (ds,) = [o for o in objects if o["kind"] == "DaemonSet"]
    (agent,) = [c for c in ds["spec"]["template"]["spec"]["containers"] if c["name"] == "agent"]
    return dict(agent)


def _documented_kustomization(tmp_path: Path) -> Path:
    """docs/install.md's kustomization for the metadata flag, pointed at this checkout."""
    text = (REPO / "docs" / "install.md").read_text()
    (block,) = [
        b for b in re.findall(r"```text\n(.*?)```", text, flags=re.S) if "--network-metadata" in b
    ]
    manifests = os.path.relpath(REPO / "manifests", tmp_path)
    (tmp_path / "kustomization.yaml").write_text(block.replace("../manifests", manifests))
    return tmp_path


def test_network_metadata_flags_only_with_a_provider_as_the_documented_patch(
    tmp_path: Path,
) -> None:
    default = _agent_container(render("chart").objects)["args"]
    assert not [a for a in default if a.startswith("--network-metadata")]
    kubectl = shutil.which("kubectl")
    if kubectl is None:
        pytest.skip("kubectl not on PATH: the manifests are rendered only with `kubectl kustomize`")
    kustomized = subprocess.run(
        [kubectl, "kustomize", "--load-restrictor=LoadRestrictionsNone",
         str(_documented_kustomization(tmp_path))],
        capture_output=True, text=True, check=True, timeout=120,
    ).stdout  # fmt: skip
    done = _template("--namespace=topoplace-system", "--set=agent.networkMetadata.provider=gcp")
    assert done.returncode == 0, done.stderr
    ours = [d for d in yaml.safe_load_all(kustomized) if d and d["kind"] == "DaemonSet"]
    theirs = [d for d in yaml.safe_load_all(done.stdout) if d and d["kind"] == "DaemonSet"]
    assert [without_helm_labels(d) for d in theirs] == ours
    assert _agent_container(theirs)["args"] == [*default, "--network-metadata=gcp"]
