"""Sizes a newcomer can hold in mind (issue 46): in product code no folder has more than 12
modules, no module more than 320 lines and no function more than 80 lines.

Product code is agent, common, webhook, e2e and benchmarks; tests and the generated gRPC
modules (``*_pb2*``) do not count, nor ``__init__``/``__main__`` towards a folder's modules.
"""

from __future__ import annotations

import ast
from collections import Counter
from collections.abc import Mapping
from pathlib import Path, PurePosixPath

import pytest

ROOT = Path(__file__).resolve().parent.parent
PRODUCT = ("agent", "common", "webhook", "e2e", "benchmarks")
MAX_MODULES = 12
MAX_MODULE_LINES = 320
MAX_FUNCTION_LINES = 80


def _product_modules() -> dict[str, str]:
    """Every product module, as its path from the repository root → its text."""
    found = {}
    for top in PRODUCT:
        for path in sorted((ROOT / top).rglob("*.py")):
            rel = path.relative_to(ROOT)
            if "_pb2" in path.name or "tests" in rel.parts:
                continue
            found[rel.as_posix()] = path.read_text(encoding="utf-8")
    return found


def breaches(modules: Mapping[str, str]) -> dict[str, str]:
    """Each bound broken by `modules` (path → text), as 'kind place' → what was measured."""
    found: dict[str, str] = {}
    per_folder: Counter[PurePosixPath] = Counter()
    for name, text in modules.items():
        path = PurePosixPath(name)
        if path.stem not in ("__init__", "__main__"):
            per_folder[path.parent] += 1
        lines = len(text.splitlines())
        if lines > MAX_MODULE_LINES:
            found[f"module {name}"] = f"{lines} lines"
        for node in ast.walk(ast.parse(text, filename=name)):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                length = (node.end_lineno or node.lineno) - node.lineno + 1
                if length > MAX_FUNCTION_LINES:
                    found[f"function {name}:{node.name}"] = f"{length} lines"
    for folder, count in per_folder.items():
        if count > MAX_MODULES:
            found[f"folder {folder}"] = f"{count} modules"
    return found


def test_product_code_stays_within_the_sizes() -> None:
    over = breaches(_product_modules())
    assert not over, "over the bounds (split by concern): " + ", ".join(
        f"{k} ({v})" for k, v in sorted(over.items())
    )


def _function(lines: int) -> str:
    return "def f():\n" + "    x = 1\n" * (lines - 1)


@pytest.mark.parametrize(
    ("modules", "expected"),
    [
        ({"a/m.py": _function(80)}, {}),
        ({"a/m.py": _function(81)}, {"function a/m.py:f": "81 lines"}),
        ({"a/m.py": "x = 1\n" * 320}, {}),
        ({"a/m.py": "x = 1\n" * 321}, {"module a/m.py": "321 lines"}),
        ({f"a/m{i}.py": "" for i in range(12)} | {"a/__init__.py": "", "a/__main__.py": ""}, {}),
        ({f"a/m{i}.py": "" for i in range(13)}, {"folder a": "13 modules"}),
        ({f"a/m{i}.py": "" for i in range(6)} | {f"a/b/m{i}.py": "" for i in range(7)}, {}),
    ],
    ids=["fn-80", "fn-81", "module-320", "module-321", "folder-12", "folder-13", "subfolder"],
)
def test_the_bounds_are_counted_as_documented(
    modules: dict[str, str], expected: dict[str, str]
) -> None:
    assert breaches(modules) == expected
