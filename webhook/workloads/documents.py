"""Mutate every pod template in a list of YAML documents and render the outcome.

The I/O-free half of `topoplace-webhook mutate`: tests and the demo call it directly.
"""

from __future__ import annotations

import difflib
import json
from dataclasses import dataclass, field
from typing import Any, Literal

from webhook.engine.outcome import EngineSettings
from webhook.engine.patch import JsonPatch
from webhook.engine.pod_fields import InvalidPod
from webhook.policy.loader import PolicySet
from webhook.vocabulary import POLICY_LABEL
from webhook.workloads.mutation import inherits_label, mutate_workload
from webhook.workloads.templates import PodTemplate, pod_templates
from webhook.yaml_io import dump_documents

__all__ = ["DocumentError", "DocumentResult", "mutate_documents", "render"]


class DocumentError(ValueError):
    """A document that is not a Kubernetes object we can read."""


@dataclass(frozen=True, slots=True)
class DocumentResult:
    """One input document: before, after, its combined patch, and what was said about it."""

    label: str
    before: dict[str, Any]
    after: dict[str, Any]
    patch: JsonPatch
    warnings: list[str] = field(default_factory=list)
    denials: list[str] = field(default_factory=list)


def mutate_documents(
    docs: list[Any], *, policies: PolicySet, settings: EngineSettings, namespace: str
) -> list[DocumentResult]:
    return [
        _mutate_one(doc, index, policies=policies, settings=settings, namespace=namespace)
        for index, doc in enumerate(docs, start=1)
    ]


def _mutate_one(
    doc: Any, index: int, *, policies: PolicySet, settings: EngineSettings, namespace: str
) -> DocumentResult:
    if not isinstance(doc, dict) or not isinstance(doc.get("kind"), str):
        raise DocumentError(f"document {index} is not a Kubernetes object (no kind)")
    metadata = _v if isinstance(_v := doc.get("metadata"), dict) else {}
    name = metadata.get("name") or (
        f"{metadata['generateName']}*" if metadata.get("generateName") else "?"
    )
    label = f"{doc['kind']}/{name}"
    ns = metadata.get("namespace") or namespace
    try:
        result = mutate_workload(doc, ns, policies, settings, strict=True, label=label)
    except InvalidPod as exc:
        raise DocumentError(str(exc)) from None
    templates = pod_templates(doc)
    warnings, denials = list(result.warnings), list(result.denials)
    if not templates:
        warnings.insert(0, f"{label}: no pod template found; left unchanged")
    if _label_misplaced(doc, templates):
        warnings.append(
            f"{label}: label {POLICY_LABEL} is on the {doc['kind']} but not on its pod "
            f"template; the webhook sees only the pods of a {doc['kind']}, so put it in the "
            "template's labels"
        )
    return DocumentResult(label, doc, result.obj, result.patch, warnings, denials)


def _label_misplaced(doc: dict[str, Any], templates: list[PodTemplate]) -> bool:
    """The workload carries the policy label but none of its pod templates does."""
    labels = (doc.get("metadata") or {}).get("labels") or {}
    if doc.get("kind") == "Pod" or inherits_label(doc.get("kind")) or POLICY_LABEL not in labels:
        return False
    return not any(
        POLICY_LABEL in ((t.pod.get("metadata") or {}).get("labels") or {}) for t in templates
    )


def render(results: list[DocumentResult], *, output: Literal["pod", "patch", "diff"]) -> str:
    if output == "pod":
        return dump_documents([r.after for r in results])
    if output == "patch":
        return "".join(json.dumps(r.patch, indent=2) + "\n" for r in results)
    chunks: list[str] = []
    for r in results:
        chunks.extend(
            difflib.unified_diff(
                dump_documents([r.before]).splitlines(keepends=True),
                dump_documents([r.after]).splitlines(keepends=True),
                fromfile=f"{r.label} (input)",
                tofile=f"{r.label} (mutated)",
            )
        )
    return "".join(chunks)
