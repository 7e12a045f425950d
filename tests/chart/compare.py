"""The Helm chart against the kustomize rendering: the same objects, apart from Helm's own
labels and the Namespace (Helm installs a release into a namespace that exists first)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from tests.manifests.rendered import Rendering

__all__ = ["HELM_LABELS", "differences", "without_helm_labels"]

# Helm's own labels on every object's metadata (not on pod templates or selectors).
HELM_LABELS = frozenset(
    {
        "helm.sh/chart",
        "app.kubernetes.io/managed-by",
        "app.kubernetes.io/instance",
        "app.kubernetes.io/version",
    }
)


def without_helm_labels(obj: dict[str, Any]) -> dict[str, Any]:
    labels = {k: v for k, v in obj["metadata"].get("labels", {}).items() if k not in HELM_LABELS}
    return {**obj, "metadata": {**obj["metadata"], "labels": labels}}


def _key(obj: dict[str, Any]) -> str:
    meta = obj["metadata"]
    where = f"{meta['namespace']}/" if "namespace" in meta else ""
    return f"{obj['kind']} {where}{meta['name']}"


def _walk(a: Any, b: Any, path: str) -> Iterator[str]:
    if isinstance(a, dict) and isinstance(b, dict):
        for k in sorted(a.keys() | b.keys()):
            if k not in b:
                yield f"{path}.{k}: only in kustomize ({a[k]!r})"
            elif k not in a:
                yield f"{path}.{k}: only in helm ({b[k]!r})"
            else:
                yield from _walk(a[k], b[k], f"{path}.{k}")
    elif isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            yield from _walk(x, y, f"{path}[{i}]")
    elif a != b:
        yield f"{path}: kustomize {a!r}, helm {b!r}"


def differences(kustomize: Rendering, chart: Rendering) -> list[str]:
    """Every difference, one line each: an object only one side has, or a field path."""
    ours = {_key(o): o for o in kustomize.objects if o["kind"] != "Namespace"}
    theirs = {_key(o): without_helm_labels(o) for o in chart.objects}
    out = [f"{k}: only in kustomize" for k in sorted(ours.keys() - theirs.keys())]
    out += [f"{k}: only in helm" for k in sorted(theirs.keys() - ours.keys())]
    for key in sorted(ours.keys() & theirs.keys()):
        out += [f"{key}{d}" for d in _walk(ours[key], theirs[key], "")]
    return out
