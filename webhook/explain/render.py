"""`explain` output: a table for people, JSON for scripts (shape documented in
docs/troubleshooting.md and DESIGN.md "Output contracts of the inspection commands")."""

from __future__ import annotations

import json
from typing import Any

from webhook.explain.requests import format_amount
from webhook.explain.verdict import Explanation

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
            }
            for v in explanation.nodes
        ],
    }


def to_json_text(explanation: Explanation) -> str:
    return json.dumps(to_json(explanation), indent=2, ensure_ascii=False) + "\n"


def to_table(explanation: Explanation) -> str:
    plan = explanation.plan
    wants = ", ".join(f"{k} {v}" for k, v in _requests(explanation).items()) or "nothing"
    policy = f"policy {plan.policy}" if plan.policy else "no placement policy applied"
    lines = [f"{explanation.pod} in {explanation.namespace}: {policy}; requests {wants}", ""]
    rows = [("NODE", "FITS", "SCORE", "REASON")]
    for v in explanation.nodes:
        why = v.reason if v.reason is not None else "; ".join(v.preferred)
        rows.append((v.node, "yes" if v.fits else "no", str(v.score), why))
    widths = [max(len(r[i]) for r in rows) for i in range(3)]
    for row in rows:
        cells = [row[i].ljust(widths[i]) for i in range(3)]
        lines.append("  ".join([*cells, row[3]]).rstrip())
    total = len(explanation.nodes)
    lines += ["", f"{explanation.fitting} of {total} node{'s' if total != 1 else ''} fit"]
    lines += [f"  {n:>{len(str(total))}} × {reason}" for reason, n in explanation.misses]
    return "\n".join(lines) + "\n"
