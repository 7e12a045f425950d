"""YAML reading and writing for the offline commands (block style, no anchors, key order kept).

Reading is bounded (size, nesting, aliases): common/yaml_input.py.
"""

from __future__ import annotations

from typing import Any

import yaml

from common.yaml_input import YamlInputError, load_documents

__all__ = ["YamlInputError", "dump_documents", "load_documents"]


# Folding long command strings over several lines makes diffs of them unreadable.
_NO_WRAP = 1 << 16


class _Dumper(yaml.SafeDumper):
    # Anchors (&id001) in a manifest confuse readers and some tools; write each value in full.
    def ignore_aliases(self, data: Any) -> bool:
        return True


def dump_documents(docs: list[Any]) -> str:
    return yaml.dump_all(
        docs,
        Dumper=_Dumper,
        sort_keys=False,
        default_flow_style=False,
        allow_unicode=True,
        width=_NO_WRAP,
    )
