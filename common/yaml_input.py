"""Bounded YAML input: every file a command or the agent reads (policies, pods, nodes, kubelet
configs, kubeconfigs) is read through here, so no file drives cost beyond a documented bound.

Three bounds, checked on the parser's event stream before anything is built from it:
- size: a file larger than its kind's `max_bytes` is refused before it is read in full;
- nesting: at most `MAX_DEPTH` levels of mappings and sequences (the recursive readers after
  this one, pydantic and the kubelet's merge patch among them, then stay far from Python's
  recursion limit);
- aliases: at most `MAX_ALIASES` aliases (`*name`), which together may expand to at most
  `MAX_ALIAS_NODES` nodes. PyYAML shares an aliased object instead of copying it, but every
  reader after it (a walk, pydantic, JSON) visits each use: a 342-byte "billion laughs" file
  expands to 10^9 nodes. go-yaml refuses the same ("document contains excessive aliasing").

The scan counts nodes as they would be expanded (each alias adds its anchor's expanded size),
in one pass, without expanding anything.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import yaml

__all__ = [
    "CONFIG",
    "LISTING",
    "MAX_ALIASES",
    "MAX_ALIAS_NODES",
    "MAX_DEPTH",
    "POLICY",
    "YamlBounds",
    "YamlInputError",
    "check_bounds",
    "check_depth",
    "describe",
    "load_documents",
    "read_text",
    "yaml_error_message",
]

MiB = 1 << 20
MAX_DEPTH = 100
MAX_ALIASES = 1_000
MAX_ALIAS_NODES = 100_000

_Loader: type[yaml.SafeLoader] = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


@dataclass(frozen=True, slots=True)
class YamlBounds:
    """What one kind of input file may hold."""

    max_bytes: int
    what: str
    """The kind of file, for the message: "a policy file"."""
    max_depth: int = MAX_DEPTH
    max_aliases: int = MAX_ALIASES
    max_alias_nodes: int = MAX_ALIAS_NODES


POLICY = YamlBounds(1 * MiB, "a policy file")  # a ConfigMap holds at most 1 MiB
CONFIG = YamlBounds(4 * MiB, "a configuration file")  # kubeconfigs, kubelet configs
LISTING = YamlBounds(128 * MiB, "an input file")  # `kubectl get ... -o yaml`, pods, workloads


class YamlInputError(ValueError):
    """Input that is not YAML or exceeds a bound; one line that names the source."""


def _size(count: int) -> str:
    return f"{count // MiB} MiB" if count % MiB == 0 else f"{count} bytes"


def describe(bounds: YamlBounds) -> str:
    """The bounds in words, for a command's help."""
    return (
        f"at most {_size(bounds.max_bytes)}, {bounds.max_depth} levels of nesting and "
        f"{bounds.max_aliases:,} YAML aliases"
    )


def read_text(path: Path | str, *, bounds: YamlBounds, stdin: IO[str] | None = None) -> str:
    """The text of `path` (`-`: standard input), refused past `bounds.max_bytes` without
    reading the rest. OSError (no such file…) is the caller's to word."""
    if str(path) == "-":
        text = (stdin or sys.stdin).read(bounds.max_bytes + 1)
        _check_size(text.encode("utf-8", "surrogateescape"), "<stdin>", bounds)
        return text
    with open(path, "rb") as file:
        data = file.read(bounds.max_bytes + 1)
    _check_size(data, str(path), bounds)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise YamlInputError(f"{path}: not UTF-8 text (byte {exc.start})") from None


def _check_size(data: bytes, source: str, bounds: YamlBounds) -> None:
    if len(data) > bounds.max_bytes:
        raise YamlInputError(
            f"{source}: larger than {_size(bounds.max_bytes)}, the most {bounds.what} may hold"
        )


def yaml_error_message(exc: yaml.YAMLError, source: str) -> str:
    """One line for a YAML syntax error: source, line, column, what the parser says."""
    mark = getattr(exc, "problem_mark", None) or getattr(exc, "context_mark", None)
    where = f"{source}: line {mark.line + 1} column {mark.column + 1}" if mark else source
    problem = getattr(exc, "problem", None) or str(exc).replace("\n", " ")
    context = getattr(exc, "context", None)
    detail = f"{context}, {problem}" if context else problem
    return f"{where}: invalid YAML: {detail}"


def check_bounds(text: str, *, source: str, bounds: YamlBounds) -> None:
    """Raise YamlInputError when `text` is too large, too deep or expands too far through
    aliases (or is not YAML); linear in `len(text)`, whatever the aliases would expand to."""
    if len(text) > bounds.max_bytes:  # characters: a cheap lower bound of the bytes
        _check_size(text.encode("utf-8", "surrogateescape"), source, bounds)
    loader = _Loader(text)
    # Expanded node count of each collection being read, and of each anchor once read.
    open_sizes: list[int] = []
    anchored: list[str | None] = []
    sizes: dict[str, int] = {}
    aliases = alias_nodes = 0
    try:
        while loader.check_event():
            event = loader.get_event()
            size = 0
            if isinstance(event, yaml.AliasEvent):
                aliases += 1
                expanded = sizes.get(event.anchor or "", 0)
                alias_nodes += expanded
                size = 1 + expanded
                if aliases > bounds.max_aliases or alias_nodes > bounds.max_alias_nodes:
                    raise YamlInputError(_alias_message(source, event, aliases, bounds))
            elif isinstance(event, yaml.CollectionStartEvent):
                if len(open_sizes) >= bounds.max_depth:
                    raise YamlInputError(
                        f"{_at(source, event)}: nested deeper than {bounds.max_depth} levels, "
                        f"the most {bounds.what} may hold"
                    )
                open_sizes.append(1)
                anchored.append(event.anchor)
                continue
            elif isinstance(event, yaml.CollectionEndEvent):
                size = open_sizes.pop()
                if (anchor := anchored.pop()) is not None:
                    sizes[anchor] = size
            elif isinstance(event, yaml.ScalarEvent):
                size = 1
                if event.anchor is not None:
                    sizes[event.anchor] = 1
            if open_sizes:
                open_sizes[-1] += size
    except yaml.YAMLError as exc:
        raise YamlInputError(yaml_error_message(exc, source)) from None
    finally:
        loader.dispose()


def _at(source: str, event: yaml.Event) -> str:
    mark = event.start_mark
    return f"{source}: line {mark.line + 1}" if mark is not None else source


def _alias_message(source: str, event: yaml.Event, aliases: int, bounds: YamlBounds) -> str:
    if aliases > bounds.max_aliases:
        return f"{_at(source, event)}: more than {bounds.max_aliases} YAML aliases"
    return (
        f"{_at(source, event)}: YAML aliases expand to more than {bounds.max_alias_nodes:,} "
        "nodes (an alias bomb?); write the repeated parts out"
    )


def check_depth(data: Any, *, source: str, bounds: YamlBounds) -> None:
    """Raise YamlInputError when `data` (parsed JSON) nests deeper than `bounds.max_depth`.
    Iterative, so any depth is measured without recursion."""
    stack: list[tuple[Any, int]] = [(data, 0)]
    while stack:
        value, depth = stack.pop()
        children = (
            value.values() if isinstance(value, dict) else value if isinstance(value, list) else ()
        )
        if children and depth >= bounds.max_depth:
            raise YamlInputError(
                f"{source}: nested deeper than {bounds.max_depth} levels, "
                f"the most {bounds.what} may hold"
            )
        stack.extend((child, depth + 1) for child in children)


def load_documents(text: str, *, source: str, bounds: YamlBounds = LISTING) -> list[Any]:
    """Non-empty documents of a multi-document YAML text, within `bounds`."""
    check_bounds(text, source=source, bounds=bounds)
    try:
        return [doc for doc in yaml.load_all(text, Loader=_Loader) if doc is not None]
    except yaml.YAMLError as exc:
        raise YamlInputError(yaml_error_message(exc, source)) from None
