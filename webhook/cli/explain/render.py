"""`explain` output: a table for people, JSON for scripts (shape documented in
docs/troubleshooting.md and docs/architecture.md, "Public contracts": outputs)."""

from __future__ import annotations

from typing import Any

import orjson

from webhook.nodefit.explanation import Explanation
from webhook.placement_model.requests import format_amount

__all__ = ["to_json", "to_json_text", "to_table"]


def _requests(explanation: Explanation) -> dict[str, str]:
    return {k: format_amount(k, v) for k, v in sorted(explanation.plan.requests.items())}


def to_json(explanation: Explanation) -> dict[str, Any]:
    plan = explanation.plan
    return {
        "pod": explanation.pod,
        "namespace": explanation.namespace,
        "policy": plan.policy,
        "gpus": plan.gpus,
        "requests": _requests(explanation),
        "fitting": explanation.fitting,
        "summary": explanation.summary,
        "warnings": list(explanation.warnings),
        "denial": explanation.denial,
        "nodes": [
            {
                "node": v.node,
                "fits": v.fits,
                "reason": v.reason,
                "check": v.check,
                "reasons": list(v.reasons),
                "score": v.score,
                "preferred": list(v.preferred),
                # null when the policy asks for no GPU↔NIC pairs
                "pairs": (
                    {"guaranteed": v.pairs.guaranteed, "path": v.pairs.path, "reason": v.pairs.text}
                    if v.pairs is not None
                    else None
                ),
                "notes": list(v.notes),
            }
            for v in explanation.nodes
        ],
    }


def to_json_text(explanation: Explanation) -> str:
    # orjson: the same text as json.dumps(indent=2, ensure_ascii=False), at 5,000 nodes in a
    # fraction of the time.
    return orjson.dumps(to_json(explanation), option=orjson.OPT_INDENT_2).decode() + "\n"


def to_table(explanation: Explanation) -> str:
    plan = explanation.plan
    wants = ", ".join(f"{k} {v}" for k, v in _requests(explanation).items()) or "nothing"
    policy = f"policy {plan.policy}" if plan.policy else "no placement policy applied"
    lines = [f"{explanation.pod} in {explanation.namespace}: {policy}; requests {wants}", ""]
    pairs = any(v.pairs is not None for v in explanation.nodes)
    rows = [("NODE", "FITS", "SCORE", *(("PAIRS",) if pairs else ()), "REASON")]
    for v in explanation.nodes:
        why = v.reason if v.reason is not None else "; ".join(v.preferred)
        why = "; ".join([why, *v.notes]) if v.notes and why else why or "; ".join(v.notes)
        paired = () if not pairs else ("-" if v.pairs is None else _yes(v.pairs.guaranteed),)
        rows.append((v.node, _yes(v.fits), str(v.score), *paired, why))
    last = len(rows[0]) - 1
    widths = [max(len(r[i]) for r in rows) for i in range(last)]
    for row in rows:
        cells = [row[i].ljust(widths[i]) for i in range(last)]
        lines.append("  ".join([*cells, row[last]]).rstrip())
    total = len(explanation.nodes)
    lines += ["", f"{explanation.fitting} of {total} node{'s' if total != 1 else ''} fit"]
    lines += [f"  {n:>{len(str(total))}} × {reason}" for reason, n in explanation.misses]
    return "\n".join(lines + _pairs_lines(explanation)) + "\n"


def _yes(flag: bool) -> str:
    return "yes" if flag else "no"


def _pairs_lines(explanation: Explanation) -> list[str]:
    """Why GPU↔NIC pairs are not guaranteed where the pod fits, once per distinct reason."""
    grouped: dict[str, list[str]] = {}
    for v in explanation.nodes:
        if v.fits and v.pairs is not None and not v.pairs.guaranteed:
            grouped.setdefault(v.pairs.text, []).append(v.node)
    if not grouped:
        return []
    lines = ["", "GPU↔NIC pairs not guaranteed where it fits:"]
    for text, names in grouped.items():
        shown = ", ".join(names[:3]) + (f" and {len(names) - 3} more" if len(names) > 3 else "")
        lines.append(f"  {shown}: {text}")
    return lines
