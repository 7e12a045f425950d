"""Render the kustomizations with the real `kubectl kustomize` and look objects up in them.

No home-made renderer: where kubectl is absent the tests that need it skip, saying so.
"""

from __future__ import annotations

import functools
import shutil
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

__all__ = [
    "MANIFESTS",
    "OVERLAYS",
    "Rendering",
    "all_containers",
    "render",
]

REPO = Path(__file__).resolve().parents[2]
MANIFESTS = REPO / "manifests"
OVERLAYS = sorted(p.name for p in (MANIFESTS / "overlays").iterdir() if p.is_dir())


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


def render(relative: str = "") -> Rendering:
    """`kubectl kustomize manifests/<relative>`; renders once per test session."""
    return _render_cached(str(MANIFESTS / relative) if relative else str(MANIFESTS))


def all_containers(pod_spec: dict[str, Any]) -> Iterator[dict[str, Any]]:
    yield from pod_spec.get("initContainers") or []
    yield from pod_spec.get("containers") or []
