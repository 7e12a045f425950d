"""The Helm chart (charts/topoplace) without helm: its generated parts match their sources,
its version is the project's, every value is documented and checked by values.schema.json,
and every kustomize overlay has its values. (With helm built, test_security and test_render
also check the chart's renderings, and tests/e2e/test_helm_chart.py compares them with
kustomize's and installs the chart.)"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

from e2e.helm.run import CHART
from tests.manifests.chart import HELM_LABELS
from tests.manifests.rendered import ALL_VALUES, OVERLAYS, REPO, helm, overlay_values, render

SCHEMA = json.loads((CHART / "values.schema.json").read_text())
DEFAULTS = yaml.safe_load((CHART / "values.yaml").read_text())


def schema_errors(values: dict[str, Any]) -> list[str]:
    """Each error as `<path>: <message>`, the path in Helm's `a/b/0/c` spelling."""
    validator = jsonschema.Draft202012Validator(SCHEMA)
    return sorted(
        "/".join(str(p) for p in e.absolute_path) + f": {e.message}"
        for e in validator.iter_errors(values)
    )


def test_generated_parts_match_their_sources() -> None:
    """files/ holds verbatim copies of the base's objects and policies, and the schema embeds
    the current policy schema: `make chart` rewrites them, this fails until it is run."""
    done = subprocess.run(
        [sys.executable, str(REPO / "charts" / "sync.py"), "--check"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr


def test_app_version_is_the_project_version_and_the_base_image_tag() -> None:
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["version"]
    base = yaml.safe_load((REPO / "manifests" / "base" / "kustomization.yaml").read_text())
    (image,) = base["images"]
    assert chart["appVersion"] == project == image["newTag"]
    assert DEFAULTS["image"] == {
        "repository": image["name"],
        "tag": "",  # the appVersion
        "pullPolicy": "IfNotPresent",
    }


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_every_overlay_has_values_that_pass_the_schema(overlay: str) -> None:
    values = yaml.safe_load(overlay_values(overlay).read_text())
    assert schema_errors(values) == []
    assert overlay in overlay_values(overlay).read_text()  # its comment names the overlay


def test_no_values_file_without_an_overlay() -> None:
    files = {p.name.removesuffix("-values.yaml") for p in (CHART / "ci").glob("*.yaml")}
    assert files == set(OVERLAYS)


def test_defaults_and_the_all_values_file_pass_the_schema() -> None:
    assert schema_errors(DEFAULTS) == []
    assert schema_errors(yaml.safe_load(ALL_VALUES.read_text())) == []


def test_the_example_policies_pass_as_inline_values() -> None:
    policies = [
        doc
        for path in sorted((REPO / "policies").glob("*.yaml"))
        for doc in yaml.safe_load_all(path.read_text())
        if doc
    ]
    assert len(policies) >= 3
    assert schema_errors({"policies": {"inline": policies}}) == []


POLICY = {
    "apiVersion": "topoplace.io/v1alpha1",
    "kind": "PlacementPolicy",
    "metadata": {"name": "p"},
}


@pytest.mark.parametrize(
    ("values", "path"),
    [
        ({"webhook": {"replicas": "two"}}, "webhook/replicas"),
        ({"webhook": {"failurePolicy": "Deny"}}, "webhook/failurePolicy"),
        ({"agent": {"gpuNodesOnly": "yes"}}, "agent/gpuNodesOnly"),
        ({"agent": {"kubeletConfig": "k3s"}}, "agent/kubeletConfig"),
        ({"agent": {"tolerations": [{"key": "a", "opertor": "Exists"}]}}, "agent/tolerations/0"),
        ({"agent": {"resources": {"limit": {"cpu": 1}}}}, "agent/resources"),
        ({"agent": {"gpuNodeOnly": True}}, "agent"),  # a misspelt key
        ({"imag": {"tag": "x"}}, ""),
        ({"image": {"pullPolicy": "always"}}, "image/pullPolicy"),
        ({"policies": {"inline": {"p": POLICY}}}, "policies/inline"),
        (
            {"policies": {"inline": [{**POLICY, "spec": {"placement": {"gpuNicLink": "FAST"}}}]}},
            "policies/inline/0/spec/placement/gpuNicLink",
        ),
        (
            {"policies": {"inline": [{**POLICY, "spec": {"launcher": {"numaBindin": "node"}}}]}},
            "policies/inline/0/spec/launcher",
        ),
        ({"policies": {"inline": [{**POLICY, "kind": "Policy"}]}}, "policies/inline/0/kind"),
    ],
)
def test_the_schema_refuses_wrong_types_and_unknown_keys(values: dict, path: str) -> None:
    errors = schema_errors(values)
    assert errors, f"{values} passed the schema"
    assert any(e.split(": ", 1)[0] == path for e in errors), errors


def _leaves(values: dict[str, Any], prefix: str = "") -> set[str]:
    out: set[str] = set()
    for key, value in values.items():
        if isinstance(value, dict) and value:
            out |= _leaves(value, f"{prefix}{key}.")
        else:
            out.add(f"{prefix}{key}")
    return out


def _schema_leaves(schema: dict[str, Any], prefix: str = "") -> set[str]:
    out: set[str] = set()
    for key, sub in schema.get("properties", {}).items():
        if key == "global":  # Helm's own, for subcharts
            continue
        if sub.get("type") == "object" and "properties" in sub:
            out |= _schema_leaves(sub, f"{prefix}{key}.")
        else:
            out.add(f"{prefix}{key}")
    return out


def test_values_yaml_and_the_schema_name_the_same_keys() -> None:
    assert _leaves(DEFAULTS) == _schema_leaves(SCHEMA)


def test_every_value_has_a_comment_above_it() -> None:
    lines = (CHART / "values.yaml").read_text().splitlines()
    undocumented = [
        line.strip()
        for i, line in enumerate(lines)
        if re.match(r"^\s+[A-Za-z]\w*:", line) and not lines[i - 1].lstrip().startswith("#")
    ]
    assert undocumented == []


def test_values_comments_name_every_overlay() -> None:
    text = (CHART / "values.yaml").read_text()
    missing = [
        o
        for o in OVERLAYS
        if f"overlays/{o}" not in text
        and not (o.startswith("kubelet-") and "overlays/kubelet-<name>" in text)
    ]
    assert missing == []


def _flat(values: dict[str, Any], prefix: str = "") -> set[str]:
    out: set[str] = set()
    for key, value in values.items():
        if isinstance(value, dict):
            out |= _flat(value, f"{prefix}{key}.")
        else:
            out.add(f"{prefix}{key}={str(value).lower() if isinstance(value, bool) else value}")
    return out


def test_the_install_guide_gives_each_overlays_values() -> None:
    rows = re.findall(
        r"^\| `kubectl apply -k manifests/overlays/([a-z-]+)` \| ([^|]+) \|",
        (REPO / "docs" / "install.md").read_text(),
        flags=re.M,
    )
    documented = {o: set(re.findall(r"`([^`]+)`", cell)) for o, cell in rows}
    expected = {o: _flat(yaml.safe_load(overlay_values(o).read_text())) for o in OVERLAYS}
    assert documented == expected


def test_helm_labels_stay_off_pod_templates_and_selectors() -> None:
    """Adopting the kustomize objects or upgrading the release never restarts a pod for a
    label, and selectors (immutable) stay as the base writes them."""
    for obj in render("chart").objects:
        labels = obj["metadata"]["labels"]
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
