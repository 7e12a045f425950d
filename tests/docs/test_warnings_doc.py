"""Every warning the webhook can give a user is explained in docs/policies.md.

The warning texts are read from the webhook's source (each `warnings.append(...)`,
`warnings=[...]` and `warning = ...` with a literal or f-string), so a new warning without
an entry in the page's table fails here.
"""

from __future__ import annotations

import ast

from tests.docs.markdown import REPO

PAGE = REPO / "docs" / "policies.md"


def _literal_texts(node: ast.AST) -> list[ast.expr]:
    """String expressions handed over as warnings somewhere inside `node`."""
    found: list[ast.expr] = []
    for sub in ast.walk(node):
        if isinstance(sub, ast.Call):
            func = sub.func
            if (
                isinstance(func, ast.Attribute)
                and func.attr == "append"
                and isinstance(func.value, ast.Name)
                and func.value.id == "warnings"
            ):
                found.extend(sub.args)
            for keyword in sub.keywords:
                if keyword.arg == "warnings" and isinstance(keyword.value, ast.List):
                    found.extend(keyword.value.elts)
        elif isinstance(sub, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == "warning" for t in sub.targets
        ):
            found.append(sub.value)
    return [e for e in found if isinstance(e, ast.JoinedStr | ast.Constant)]


def _longest_fixed_part(expr: ast.expr) -> str:
    parts = expr.values if isinstance(expr, ast.JoinedStr) else [expr]
    texts = [p.value for p in parts if isinstance(p, ast.Constant) and isinstance(p.value, str)]
    return max((t.strip(" ;:") for t in texts), key=len, default="")


def _warning_fragments() -> dict[str, str]:
    fragments: dict[str, str] = {}
    for module in sorted((REPO / "webhook").rglob("*.py")):
        tree = ast.parse(module.read_text(encoding="utf-8"))
        for expr in _literal_texts(tree):
            fragment = _longest_fixed_part(expr)
            if len(fragment) >= 12:  # long enough to name one warning
                fragments[fragment] = f"{module.name}:{expr.lineno}"
    return fragments


def test_the_source_scan_finds_the_known_warnings() -> None:
    fragments = " | ".join(_warning_fragments())
    assert "(exclusive cores need whole CPUs)" in fragments
    assert "overrides same-named envFrom keys" in fragments


def test_every_webhook_warning_is_explained() -> None:
    page = PAGE.read_text(encoding="utf-8")
    missing = {f: where for f, where in _warning_fragments().items() if f not in page}
    assert missing == {}
