"""docs/install.md stays true: its Kubernetes objects are schema-valid and every overlay is
documented."""

from __future__ import annotations

import re

import yaml

from tests.kube import assert_valid
from tests.manifests.rendered import MANIFESTS, OVERLAYS, REPO

INSTALL = REPO / "docs" / "install.md"


def _yaml_blocks() -> list[dict]:
    text = INSTALL.read_text()
    docs = []
    for block in re.findall(r"```yaml\n(.*?)```", text, flags=re.S):
        docs.extend(d for d in yaml.safe_load_all(block.replace("NODE", "gpu-node-1")) if d)
    return docs


def test_kubernetes_objects_in_the_guide_are_valid() -> None:
    # KubeletConfiguration is a file format, not an API object: no API schema to check against
    objects = [d for d in _yaml_blocks() if "kind" in d and d["kind"] != "KubeletConfiguration"]
    assert sorted(o["kind"] for o in objects) == ["Job", "Pod"]
    for obj in objects:
        assert_valid(obj)


def test_the_check_pod_opts_into_a_shipped_policy() -> None:
    (pod,) = [d for d in _yaml_blocks() if d.get("kind") == "Pod"]
    policy = pod["metadata"]["labels"]["topoplace.io/policy"]
    names = set()
    for path in (REPO / "policies").glob("*.yaml"):
        names |= {d["metadata"]["name"] for d in yaml.safe_load_all(path.read_text()) if d}
    assert policy in names


def test_every_overlay_is_documented() -> None:
    guide = INSTALL.read_text()
    root = (MANIFESTS / "kustomization.yaml").read_text()
    for overlay in OVERLAYS:
        assert f"manifests/overlays/{overlay}" in guide
        assert f"manifests/overlays/{overlay}" in root
