"""explain's per-domain view of a workload under keepTogether, beside the per-node one.

Not a subcommand: a helper of webhook/cli/explain/command.py. Table: one line per domain of the
policy's level after the node table; JSON: a `domains` object beside `nodes`.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence
from typing import Any

from webhook.explain.domains import WorkloadDomains, explain_domains
from webhook.explain.free import ZonesOf
from webhook.explain.render import to_json, to_table
from webhook.explain.verdict import Explanation
from webhook.topology.filters.nodes import NodeView
from webhook.workloads.templates import pods_of

__all__ = ["domains_json", "domains_table", "render_with_domains", "workload_domains"]


def workload_domains(
    args: argparse.Namespace,
    explanation: Explanation,
    nodes: Sequence[NodeView],
    zones: ZonesOf | None,
) -> WorkloadDomains | None:
    workload = getattr(args, "workload", None)
    policy = explanation.plan.applied
    rule = policy.spec.placement.keep_together if policy is not None else None
    if workload is None or rule is None or workload[0].get("kind") == "Pod":
        return None
    doc, template = workload
    return explain_domains(
        explanation.plan,
        nodes,
        level=rule.level,
        key=rule.label_key,
        wanted=pods_of(doc, template),
        zones=zones,
    )


def domains_json(view: WorkloadDomains) -> dict[str, Any]:
    return {
        "level": view.level,
        "key": view.key,
        "pods": view.wanted,
        "fitting": view.fitting,
        "domains": [
            {
                "domain": d.domain,
                "fits": d.fits,
                "reason": d.reason,
                "nodes": [{"node": n.node, "pods": n.pods, "reason": n.reason} for n in d.nodes],
            }
            for d in view.domains
        ],
        "unlabelled": list(view.unlabelled),
    }


def domains_table(view: WorkloadDomains) -> str:
    total = len(view.domains)
    lines = [
        f"keepTogether {view.level}: {view.fitting} of {total} domain{'s' if total != 1 else ''}"
        f" hold all {view.wanted} pods"
    ]
    lines += [f"  {view.level} {d.line}" for d in view.domains]
    if view.unlabelled:
        shown = ", ".join(view.unlabelled[:5]) + (", …" if len(view.unlabelled) > 5 else "")
        lines.append(f"  {len(view.unlabelled)} node(s) without {view.key}: {shown}")
    return "\n".join(lines) + "\n"


def render_with_domains(
    args: argparse.Namespace,
    explanation: Explanation,
    nodes: Sequence[NodeView],
    zones: ZonesOf | None,
) -> str:
    view = workload_domains(args, explanation, nodes, zones)
    if args.output == "json":
        doc = to_json(explanation)
        if view is not None:
            doc["domains"] = domains_json(view)
        return json.dumps(doc, indent=2, ensure_ascii=False) + "\n"
    text = to_table(explanation)
    return text if view is None else text + "\n" + domains_table(view)
