"""The Helm chart (charts/topoplace) without helm: its generated parts match their sources,
its version is the project's, every value is documented and checked by values.schema.json,
and every kustomize overlay has its values. (test_render.py here, tests/manifests'
test_security and test_render, and tests/e2e/test_helm_chart.py check its renderings.)"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import tomllib
from typing import Any

import jsonschema
import pytest
import yaml

from e2e.helm.run import CHART
from tests.manifests.rendered import ALL_VALUES, OVERLAYS, REPO, overlay_values

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
        ({"agent": {"networkMetadata": {"provider": "aws"}}}, "agent/networkMetadata/provider"),
        ({"agent": {"networkMetadata": {"timeout": 0}}}, "agent/networkMetadata/timeout"),
        ({"agent": {"networkMetadata": {"timeout": 11}}}, "agent/networkMetadata/timeout"),
        ({"agent": {"networkMetadata": {"endpoint": "imds"}}}, "agent/networkMetadata/endpoint"),
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
