"""YAML reading and writing for the offline commands (block style, no anchors, key order kept)."""

from __future__ import annotations

from typing import Any

import yaml

__all__ = ["YamlInputError", "dump_documents", "load_documents"]

_Loader: type[yaml.SafeLoader] = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


# Folding long command strings over several lines makes diffs of them unreadable.
_NO_WRAP = 1 << 16


class _Dumper(yaml.SafeDumper):
    # Anchors (&id001) in a manifest confuse readers and some tools; write each value in full.
    def ignore_aliases(self, data: Any) -> bool:
        return True


class YamlInputError(ValueError):
    """Input that is not YAML; the message names the source and line."""


def load_documents(text: str, *, source: str) -> list[Any]:
    """Non-empty documents of a multi-document YAML text."""
    try:
        return [doc for doc in yaml.load_all(text, Loader=_Loader) if doc is not None]
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"{source}: line {mark.line + 1} column {mark.column + 1}" if mark else source
        problem = getattr(exc, "problem", None) or str(exc)
        raise YamlInputError(f"{where}: invalid YAML: {problem}") from None


def dump_documents(docs: list[Any]) -> str:
    return yaml.dump_all(
        docs,
        Dumper=_Dumper,
        sort_keys=False,
        default_flow_style=False,
        allow_unicode=True,
        width=_NO_WRAP,
    )
