"""Load every policy in a directory into an immutable, hashed PolicySet.

The directory is usually a ConfigMap volume: `DIR/*.yaml` are symlinks into `DIR/..data/`,
which the kubelet swaps atomically. Reading `DIR/*.yaml` (and skipping dot entries) sees
exactly one generation. All problems are collected and raised together, so one `validate`
run lists every mistake.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any

import yaml
from pydantic import ValidationError

from common.yaml_input import POLICY, YamlInputError, check_bounds, read_text, yaml_error_message
from webhook.policy.model import PlacementPolicy

__all__ = [
    "PolicyLoadError",
    "PolicyOrigin",
    "PolicySet",
    "load_policy_dir",
    "parse_policy_text",
    "policy_hash",
]

_Loader: type[yaml.SafeLoader] = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


class PolicyLoadError(Exception):
    """Every problem found while loading policies, one self-contained message each."""

    def __init__(self, messages: list[str]) -> None:
        super().__init__("\n".join(messages))
        self.messages = list(messages)


@dataclass(frozen=True, slots=True)
class PolicyOrigin:
    """Where a policy was defined, for messages (`file`, 1-based document index)."""

    file: str
    document: int

    def __str__(self) -> str:
        return f"{self.file} document {self.document}"


def _empty() -> Mapping[str, Any]:
    return MappingProxyType({})


def _generation_hash(hashes: Mapping[str, str]) -> str:
    whole = hashlib.sha256()
    for name in sorted(hashes):
        whole.update(f"{name}@{hashes[name]}\n".encode())
    return whole.hexdigest()[:16]


# eq=False: Mapping's item-wise equality is the meaningful one.
@dataclass(frozen=True, slots=True, eq=False)
class PolicySet(Mapping[str, PlacementPolicy]):
    """Policies by name, each with a content hash; O(1) lookup, never mutated after loading.

    Build one with `PolicySet.build(...)` (or `load_policy_dir`); `PolicySet()` is the empty set.
    """

    policies: Mapping[str, PlacementPolicy] = field(default_factory=_empty)
    hashes: Mapping[str, str] = field(default_factory=_empty)
    origins: Mapping[str, PolicyOrigin] = field(default_factory=_empty)
    files: tuple[str, ...] = ()
    names: tuple[str, ...] = ()
    """Policy names, sorted (for messages and metrics)."""
    generation_hash: str = _generation_hash({})
    """Hash of the whole set: changes exactly when some policy is added, removed or edited."""

    @classmethod
    def build(
        cls, entries: list[tuple[PlacementPolicy, PolicyOrigin]], *, files: tuple[str, ...] = ()
    ) -> PolicySet:
        policies = {policy.name: policy for policy, _ in entries}
        hashes = {name: policy_hash(policy) for name, policy in policies.items()}
        return cls(
            policies=MappingProxyType(policies),
            hashes=MappingProxyType(hashes),
            origins=MappingProxyType({policy.name: origin for policy, origin in entries}),
            files=files,
            names=tuple(sorted(policies)),
            generation_hash=_generation_hash(hashes),
        )

    def __getitem__(self, name: str) -> PlacementPolicy:
        return self.policies[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self.policies)

    def __len__(self) -> int:
        return len(self.policies)

    def __contains__(self, name: object) -> bool:
        return name in self.policies

    def hash_of(self, name: str) -> str:
        return self.hashes[name]


def policy_hash(policy: PlacementPolicy) -> str:
    """Short content hash: equal for equal policies, whatever the YAML formatting."""
    canonical = json.dumps(
        policy.model_dump(mode="json", by_alias=True), sort_keys=True, separators=(",", ":")
    )
    return hashlib.sha256(canonical.encode()).hexdigest()[:12]


def load_policy_dir(path: Path) -> PolicySet:
    """Every policy in `path/*.yaml`; raises PolicyLoadError listing all problems."""
    if not path.is_dir():
        raise PolicyLoadError([f"{path}: not a directory (expected a directory of *.yaml files)"])
    files = sorted(p for p in path.glob("*.yaml") if not p.name.startswith(".") and p.is_file())
    errors: list[str] = []
    entries: list[tuple[PlacementPolicy, PolicyOrigin]] = []
    for file in files:
        try:
            text = read_text(file, bounds=POLICY)
        except OSError as exc:
            errors.append(f"{file}: cannot read: {exc}")
            continue
        except YamlInputError as exc:
            errors.append(str(exc))
            continue
        found, problems = parse_policy_text(text, source=str(file))
        entries.extend(found)
        errors.extend(problems)
    errors.extend(_duplicates(entries))
    if errors:
        raise PolicyLoadError(errors)
    return PolicySet.build(entries, files=tuple(str(f) for f in files))


def parse_policy_text(
    text: str, *, source: str
) -> tuple[list[tuple[PlacementPolicy, PolicyOrigin]], list[str]]:
    """Policies and error messages from one multi-document YAML text; empty documents skipped.

    A text past the bounds of a policy file (size, nesting, aliases) is one error, found
    before any of it is built."""
    found: list[tuple[PlacementPolicy, PolicyOrigin]] = []
    errors: list[str] = []
    try:
        check_bounds(text, source=source, bounds=POLICY)
    except YamlInputError as exc:
        return found, [str(exc)]
    loader = _Loader(text)
    index = 0
    try:
        while loader.check_node():
            node = loader.get_node()
            if node is None:  # check_node() said one follows, so PyYAML never gives None here
                break
            index += 1
            data = loader.construct_document(node)
            if data is None:
                continue
            origin = PolicyOrigin(source, index)
            if not isinstance(data, dict):
                errors.append(
                    f"{_where(origin, node)}: expected a mapping (a PlacementPolicy), "
                    f"got {type(data).__name__}"
                )
                continue
            duplicates = list(_duplicate_keys(node))
            if duplicates:
                # YAML keeps only the last of two equal keys; a silently lost block is worse
                # than an error.
                errors.extend(
                    f"{_where(origin, second)}: duplicate key {key!r} (first at line "
                    f"{first.start_mark.line + 1}); only one is allowed"
                    for key, first, second in duplicates
                )
                continue
            try:
                found.append((PlacementPolicy.model_validate(data), origin))
            except ValidationError as exc:
                errors.extend(_validation_messages(exc, origin, node, data))
            except (ArithmeticError, LookupError, TypeError, ValueError) as exc:
                # A validator that slipped (pydantic wraps only ValueError): still one line
                # naming the document, so validate and serve refuse it alike.
                errors.append(f"{_where(origin, node)}: {type(exc).__name__}: {exc}")
    except yaml.YAMLError as exc:
        errors.append(yaml_error_message(exc, source))
    finally:
        loader.dispose()
    return found, errors


def _duplicates(entries: list[tuple[PlacementPolicy, PolicyOrigin]]) -> list[str]:
    first: dict[str, PolicyOrigin] = {}
    errors: list[str] = []
    for policy, origin in entries:
        seen = first.setdefault(policy.name, origin)
        if seen is not origin:
            errors.append(
                f"{origin}: metadata.name: duplicate policy name {policy.name!r}, "
                f"first defined in {seen}; policy names must be unique across all files"
            )
    return errors


def _validation_messages(
    exc: ValidationError, origin: PolicyOrigin, node: yaml.Node, data: dict[str, Any]
) -> list[str]:
    name = data.get("metadata", {}).get("name") if isinstance(data.get("metadata"), dict) else None
    label = f" ({name})" if isinstance(name, str) and name else ""
    messages = []
    for error in exc.errors(include_url=False):
        loc = [part for part in error["loc"] if part != "[key]"]
        dotted = _dotted(loc) or "<document>"
        message = error["msg"].removeprefix("Value error, ")
        if error["type"] not in ("missing", "extra_forbidden", "value_error") and not isinstance(
            error.get("input"), dict | list
        ):
            message += f" (got {error['input']!r})"
        elif error["type"] == "extra_forbidden":
            message = "unknown field (not part of PlacementPolicy; check spelling and nesting)"
        messages.append(f"{_where(origin, _node_at(node, loc))}{label}: {dotted}: {message}")
    return messages


def _dotted(loc: list[int | str]) -> str:
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


def _where(origin: PolicyOrigin, node: yaml.Node | None) -> str:
    if node is None:
        return str(origin)
    return f"{origin.file}: line {node.start_mark.line + 1} document {origin.document}"


def _node_at(node: yaml.Node, loc: list[int | str]) -> yaml.Node:
    """The YAML node at `loc` (or its deepest existing parent), for a line number."""
    for part in loc:
        child: yaml.Node | None = None
        if isinstance(node, yaml.MappingNode):
            for key, value in node.value:
                if key.value == part:
                    child = value
                    break
        elif isinstance(node, yaml.SequenceNode) and isinstance(part, int) and part >= 0:
            child = node.value[part] if part < len(node.value) else None
        if child is None:
            break
        node = child
    return node


def _duplicate_keys(
    node: yaml.Node, walked: set[int] | None = None
) -> Iterator[tuple[str, yaml.Node, yaml.Node]]:
    """(key, first key node, repeated key node) for every repeated key in nested mappings.

    An alias is the node it names: each node is walked once, however often it is used (and
    no deeper than the bounded nesting of a policy file)."""
    walked = set() if walked is None else walked
    if id(node) in walked:
        return
    walked.add(id(node))
    if isinstance(node, yaml.MappingNode):
        seen: dict[Any, yaml.Node] = {}
        for key, value in node.value:
            if isinstance(key, yaml.ScalarNode):
                if key.value in seen:
                    yield key.value, seen[key.value], key
                seen.setdefault(key.value, key)
            yield from _duplicate_keys(value, walked)
    elif isinstance(node, yaml.SequenceNode):
        for item in node.value:
            yield from _duplicate_keys(item, walked)
