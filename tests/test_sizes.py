"""Sizes a newcomer can hold in mind (issue 46): in product code no folder has more than 12
modules, no module more than 320 lines and no function more than 80 lines.

Product code is agent, common, webhook, e2e and benchmarks; tests and the generated gRPC
modules (``*_pb2*``) do not count, nor ``__init__``/``__main__`` towards a folder's modules.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PRODUCT = ("agent", "common", "webhook", "e2e", "benchmarks")
MAX_MODULES = 12
MAX_MODULE_LINES = 320
MAX_FUNCTION_LINES = 80

# Over the bounds today and being regrouped on another branch (issue 46, the webhook side):
# each entry leaves this set when its room is split. Nothing new may join it.
KNOWN_OVERSIZE: frozenset[str] = frozenset(
    {
        "folder webhook/server",
        "folder webhook/engine",
        "module webhook/explain/verdict.py",
        "function webhook/server/app.py:build_app",
        "function webhook/engine/recipe.py:_apply",
    }
)


def _modules() -> list[Path]:
    found = []
    for top in PRODUCT:
        for path in sorted((ROOT / top).rglob("*.py")):
            rel = path.relative_to(ROOT)
            if "_pb2" in path.name or "tests" in rel.parts:
                continue
            found.append(path)
    return found


def _oversize() -> dict[str, str]:
    """Every breach as 'kind place' → what was measured."""
    breaches: dict[str, str] = {}
    per_folder: dict[Path, int] = {}
    for path in _modules():
        rel = path.relative_to(ROOT)
        if path.stem not in ("__init__", "__main__"):
            per_folder[rel.parent] = per_folder.get(rel.parent, 0) + 1
        text = path.read_text(encoding="utf-8")
        lines = len(text.splitlines())
        if lines > MAX_MODULE_LINES:
            breaches[f"module {rel.as_posix()}"] = f"{lines} lines"
        for node in ast.walk(ast.parse(text, filename=str(rel))):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                length = (node.end_lineno or node.lineno) - node.lineno + 1
                if length > MAX_FUNCTION_LINES:
                    breaches[f"function {rel.as_posix()}:{node.name}"] = f"{length} lines"
    for folder, count in per_folder.items():
        if count > MAX_MODULES:
            breaches[f"folder {folder.as_posix()}"] = f"{count} modules"
    return breaches


def test_product_code_stays_within_the_sizes() -> None:
    over = {k: v for k, v in _oversize().items() if k not in KNOWN_OVERSIZE}
    assert not over, "over the bounds (split by concern): " + ", ".join(
        f"{k} ({v})" for k, v in sorted(over.items())
    )


def test_known_exceptions_are_still_over() -> None:
    """An entry that has been fixed must leave KNOWN_OVERSIZE, so the set only shrinks."""
    stale = KNOWN_OVERSIZE - set(_oversize())
    assert not stale, f"now within the bounds, remove from KNOWN_OVERSIZE: {sorted(stale)}"


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        ("def f():\n" + "    x = 1\n" * 80, "function"),
        ("def f():\n" + "    x = 1\n" * 79, None),
    ],
)
def test_the_function_bound_counts_def_to_last_line(source: str, expected: str | None) -> None:
    tree = ast.parse(source)
    fn = tree.body[0]
    assert isinstance(fn, ast.FunctionDef)
    length = (fn.end_lineno or fn.lineno) - fn.lineno + 1
    assert (length > MAX_FUNCTION_LINES) == (expected == "function")
