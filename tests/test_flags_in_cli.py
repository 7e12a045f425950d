"""Commands assemble, domains do not parse flags (issue 46): in agent, common and webhook only a
`cli` package imports argparse; everything else takes typed settings."""

from __future__ import annotations

import ast
from pathlib import Path

from tests.conftest import REPO_ROOT


def argparse_users(root: Path, packages: tuple[str, ...]) -> list[str]:
    """Modules outside a `cli` package that import argparse, as paths from `root`."""
    found = []
    for package in packages:
        for path in sorted((root / package).rglob("*.py")):
            rel = path.relative_to(root)
            if "cli" in rel.parts:
                continue
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                names = (
                    [a.name for a in node.names]
                    if isinstance(node, ast.Import)
                    else [node.module or ""]
                    if isinstance(node, ast.ImportFrom)
                    else []
                )
                if any(n == "argparse" or n.startswith("argparse.") for n in names):
                    found.append(rel.as_posix())
                    break
    return found


def test_only_cli_packages_parse_flags() -> None:
    assert argparse_users(REPO_ROOT, ("agent", "common", "webhook")) == []


def test_a_domain_module_that_parses_flags_is_found(tmp_path: Path) -> None:
    (tmp_path / "pkg" / "cli").mkdir(parents=True)
    (tmp_path / "pkg" / "cli" / "main.py").write_text("import argparse\n")
    (tmp_path / "pkg" / "engine.py").write_text("def f():\n    from argparse import Namespace\n")
    (tmp_path / "pkg" / "model.py").write_text("import dataclasses\n")
    assert argparse_users(tmp_path, ("pkg",)) == ["pkg/engine.py"]
