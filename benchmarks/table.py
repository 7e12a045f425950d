"""Render benchmark rows (plain dicts) as Markdown tables, one per section."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

__all__ = ["fmt", "markdown_table"]


def fmt(value: object) -> str:
    if isinstance(value, float):
        if value == 0:
            return "0"
        if abs(value) >= 100:
            return f"{value:,.0f}"
        if abs(value) >= 1:
            return f"{value:.2f}"
        return f"{value:.3g}"
    if isinstance(value, int) and not isinstance(value, bool):
        return f"{value:,}"
    return str(value)


def markdown_table(rows: Sequence[Mapping[str, object]]) -> str:
    if not rows:
        return "(no rows)\n"
    columns: list[str] = []
    for row in rows:
        columns += [c for c in row if c not in columns]
    lines = [
        "| " + " | ".join(columns) + " |",
        "|" + "|".join("---" for _ in columns) + "|",
    ]
    for row in rows:
        lines.append("| " + " | ".join(fmt(row.get(c, "")) for c in columns) + " |")
    return "\n".join(lines) + "\n"
