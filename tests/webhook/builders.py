"""Builders for policy documents and pods, and the invariant check every mutation must pass."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import jsonpatch
import yaml

from tests.kube import assert_valid, qos_class
from webhook.engine.outcome import EngineSettings, Mutation
from webhook.vocabulary import POLICY_LABEL

__all__ = ["GPU", "SETTINGS", "check_mutation", "container", "make_pod", "policy_doc", "write_yaml"]

GPU = "nvidia.com/gpu"
SETTINGS = EngineSettings(cache_root=Path("/var/lib/topoplace/datasets"), prefetch_image="img:1")


def policy_doc(name: str = "p", **spec: Any) -> dict[str, Any]:
    """A PlacementPolicy document as a user would write it (camelCase keys)."""
    return {
        "apiVersion": "topoplace.io/v1alpha1",
        "kind": "PlacementPolicy",
        "metadata": {"name": name},
        "spec": spec,
    }


def write_yaml(path: Path, *docs: Any) -> Path:
    path.write_text(yaml.safe_dump_all(list(docs), sort_keys=False))
    return path


def container(name: str = "trainer", *, gpus: int | None = None, **fields: Any) -> dict[str, Any]:
    c: dict[str, Any] = {"name": name, "image": "nvcr.io/nvidia/pytorch:25.01-py3", **fields}
    if gpus is not None:
        c.setdefault("resources", {}).setdefault("limits", {})[GPU] = gpus
    return c


def make_pod(*containers: dict[str, Any], policy: str | None = "p", **spec: Any) -> dict[str, Any]:
    labels = {"app": "train"}
    if policy is not None:
        labels[POLICY_LABEL] = policy
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "train-0", "namespace": "ml-team", "labels": labels},
        "spec": {"containers": list(containers) or [container(gpus=8)], **spec},
    }


def check_mutation(pod: dict[str, Any], result: Mutation) -> dict[str, Any]:
    """The invariants every mutation must keep; returns the mutated pod."""
    assert jsonpatch.apply_patch(pod, result.patch) == result.pod
    assert_valid(result.pod)
    assert qos_class(result.pod) == "Guaranteed"
    return result.pod
