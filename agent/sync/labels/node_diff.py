"""Pure comparison of a Node's owned labels/annotation with the discovered ones.

Produces the one merge-patch body the sync loop sends (or None when nothing differs) and the
human descriptions the logs print. Keys outside the agent's prefixes never appear in a patch,
whatever they look like: ownership is decided by `common.vocabulary.is_owned_key` alone.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from common.vocabulary import DATASET_PREFIX, LABEL_PREFIX, TOPOLOGY_ANNOTATION, is_owned_key

__all__ = [
    "Change",
    "NodeMeta",
    "changes_between",
    "cleanup_patch",
    "describe",
    "owned_part",
    "patch_for",
    "sync_patch",
]

Kind = Literal["label", "annotation"]


@dataclass(frozen=True, slots=True)
class NodeMeta:
    """The parts of a Node the agent reads and writes."""

    labels: Mapping[str, str]
    annotations: Mapping[str, str]


@dataclass(frozen=True, slots=True)
class Change:
    """One owned key whose value differs; `None` on either side means absent."""

    kind: Kind
    key: str
    old: str | None
    new: str | None


def owned_part(mapping: Mapping[str, str]) -> dict[str, str]:
    """The entries of a label or annotation map that the agent owns."""
    return {k: v for k, v in mapping.items() if is_owned_key(k)}


def _check_owned(kind: Kind, mapping: Mapping[str, str]) -> None:
    foreign = sorted(k for k in mapping if not is_owned_key(k))
    if foreign:
        # A desired key outside our prefixes would overwrite someone else's label.
        raise ValueError(f"desired {kind}s include keys the agent does not own: {foreign}")


def _map_changes(
    kind: Kind, current: Mapping[str, str], desired: Mapping[str, str]
) -> list[Change]:
    have = owned_part(current)
    keys = sorted(set(have) | set(desired))
    return [
        Change(kind, key, have.get(key), desired.get(key))
        for key in keys
        if have.get(key) != desired.get(key)
    ]


def changes_between(current: NodeMeta, desired: NodeMeta) -> tuple[Change, ...]:
    """Owned keys to add, change or remove so that `current` shows `desired`.

    `desired` must hold only owned keys (ValueError otherwise); foreign keys in `current` are
    ignored.
    """
    _check_owned("label", desired.labels)
    _check_owned("annotation", desired.annotations)
    return (
        *_map_changes("label", current.labels, desired.labels),
        *_map_changes("annotation", current.annotations, desired.annotations),
    )


def patch_for(changes: tuple[Change, ...]) -> dict[str, Any] | None:
    """A JSON merge-patch (RFC 7386) body applying `changes`; null deletes. None when empty."""
    if not changes:
        return None
    metadata: dict[str, dict[str, str | None]] = {}
    for change in changes:
        section = "labels" if change.kind == "label" else "annotations"
        metadata.setdefault(section, {})[change.key] = change.new
    return {"metadata": metadata}


def sync_patch(current: NodeMeta, desired: NodeMeta) -> dict[str, Any] | None:
    """Shortcut: the patch that turns `current`'s owned keys into `desired`, or None."""
    return patch_for(changes_between(current, desired))


def cleanup_patch(current: NodeMeta) -> dict[str, Any] | None:
    """A patch removing every owned label and annotation present on the node, or None."""
    return sync_patch(current, NodeMeta(labels={}, annotations={}))


def describe(change: Change) -> str:
    """A log phrase such as "gpu-nic-pairs 8 → 7" or "dataset imagenet 2024-06 became complete"."""
    if change.kind == "label" and change.key.startswith(DATASET_PREFIX):
        name = change.key.removeprefix(DATASET_PREFIX)
        if change.new is None:
            return f"dataset {name} removed (was {change.old})"
        if change.old is None:
            return f"dataset {name} {change.new} became complete"
        return f"dataset {name} {change.old} → {change.new}"
    if change.kind == "annotation":
        short = "topology" if change.key == TOPOLOGY_ANNOTATION else change.key
        if change.old is None:
            return f"{short} annotation added"
        return f"{short} annotation {'removed' if change.new is None else 'changed'}"
    short = change.key.removeprefix(LABEL_PREFIX)
    if change.old is None:
        return f"{short} = {change.new} (added)"
    if change.new is None:
        return f"{short} removed (was {change.old})"
    return f"{short} {change.old} → {change.new}"
