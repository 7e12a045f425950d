"""Render the kustomizations with the real `kubectl kustomize`, and the Helm chart with the
real `helm template`, and look objects up in them.

No home-made renderer: where kubectl or helm is absent the tests that need it skip, saying so
(helm comes from `make e2e-bin`; `make e2e` runs the chart's checks in any case).
"""

from __future__ import annotations

import functools
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from e2e.helm.run import CHART, Helm, helm_binary

__all__ = [
    "ALL_VALUES",
    "CHART_TARGETS",
    "MANIFESTS",
    "NAMESPACE",
    "OVERLAYS",
    "Rendering",
    "all_containers",
    "helm",
    "overlay_values",
    "render",
]

REPO = Path(__file__).resolve().parents[2]
MANIFESTS = REPO / "manifests"
OVERLAYS = sorted(p.name for p in (MANIFESTS / "overlays").iterdir() if p.is_dir())
NAMESPACE = "topoplace-system"
# Every value that no overlay sets, set to something other than its default.
ALL_VALUES = REPO / "tests" / "chart" / "values-all.yaml"
# "chart" (default values), "chart/<overlay>" (that overlay's values), "chart/all-values".
CHART_TARGETS = ["chart", *(f"chart/{o}" for o in OVERLAYS), "chart/all-values"]


@dataclass(frozen=True, slots=True)
class Rendering:
    objects: tuple[dict[str, Any], ...]

    def all(self, kind: str) -> list[dict[str, Any]]:
        return [o for o in self.objects if o["kind"] == kind]

    def one(self, kind: str, name: str | None = None) -> dict[str, Any]:
        found = [o for o in self.all(kind) if name is None or o["metadata"]["name"] == name]
        if len(found) != 1:
            raise LookupError(f"expected one {kind} {name or ''}, found {len(found)}")
        return found[0]

    def has(self, kind: str, name: str) -> bool:
        return any(o["metadata"]["name"] == name for o in self.all(kind))


@functools.cache
def _render_cached(target: str) -> Rendering:
    kubectl = shutil.which("kubectl")
    if kubectl is None:
        pytest.skip("kubectl not on PATH: the manifests are rendered only with `kubectl kustomize`")
    proc = subprocess.run(
        [kubectl, "kustomize", target], capture_output=True, text=True, timeout=120, check=False
    )
    if proc.returncode != 0:
        raise AssertionError(f"kubectl kustomize {target} failed:\n{proc.stderr}")
    return Rendering(tuple(d for d in yaml.safe_load_all(proc.stdout) if d))


def overlay_values(overlay: str) -> Path:
    """The values that make the chart render what manifests/overlays/<overlay> renders."""
    return CHART / "ci" / f"{overlay}-values.yaml"


@functools.cache
def _helm_home() -> Path:
    return Path(tempfile.mkdtemp(prefix="topoplace-helm-"))


def helm() -> Helm:
    binary = helm_binary()
    if binary is None:
        pytest.skip("helm not built: `make e2e-bin` builds it (make e2e runs these checks)")
    return Helm(binary, _helm_home())


@functools.cache
def _render_chart(target: str) -> Rendering:
    name = target.removeprefix("chart").removeprefix("/")
    values = [] if not name else [ALL_VALUES if name == "all-values" else overlay_values(name)]
    out = helm()(
        "template",
        "topoplace",
        str(CHART),
        f"--namespace={NAMESPACE}",
        "--include-crds",  # crds/: the NodeResourceTopology CRD, as kustomize renders it
        *(f"--values={v}" for v in values),
    )
    return Rendering(tuple(d for d in yaml.safe_load_all(out) if d))


def render(relative: str = "") -> Rendering:
    """`kubectl kustomize manifests/<relative>`, or `helm template` of the chart for a
    CHART_TARGETS entry; renders once per test session."""
    if relative == "chart" or relative.startswith("chart/"):
        return _render_chart(relative)
    return _render_cached(str(MANIFESTS / relative) if relative else str(MANIFESTS))


def all_containers(pod_spec: dict[str, Any]) -> Iterator[dict[str, Any]]:
    yield from pod_spec.get("initContainers") or []
    yield from pod_spec.get("containers") or []
