"""explain's per-domain view of a workload under keepTogether, beside the per-node one.

Not a subcommand: a helper of webhook/cli/explain/command.py. Table: one line per domain of the
policy's level after the node table; JSON: a `domains` object beside `nodes`. Where a
Kubernetes PodGroup holds the pods (the one the template names, given in the same FILE, or a
Job's spec.scheduling), the domains are those of the group's constraint key and the count its
gang's minCount: what kube-scheduler will try to place in one domain.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence
from typing import Any

from webhook.cli.explain.render import to_json, to_table
from webhook.nodefit.domains import WorkloadDomains, explain_domains, group_constraint
from webhook.nodefit.explanation import Explanation
from webhook.nodefit.free_check import ZonesOf
from webhook.placement_model.filters.nodes import NodeView
from webhook.workloads.templates import pods_of

__all__ = ["domains_json", "domains_table", "render_with_domains", "workload_domains"]


def workload_domains(
    args: argparse.Namespace,
    explanation: Explanation,
    nodes: Sequence[NodeView],
    zones: ZonesOf | None,
) -> WorkloadDomains | None:
    workload = getattr(args, "workload", None)
    if workload is None:
        return None
    doc, template = workload
    policy = explanation.plan.applied
    rule = policy.spec.placement.keep_together if policy is not None else None
    group = group_constraint(doc, template.pod, getattr(args, "documents", ()))
    if group is not None and group.key is not None:
        level = rule.level if rule is not None and rule.label_key == group.key else group.key
        wanted = group.pods or pods_of(doc, template)
        return explain_domains(
            explanation.plan,
            nodes,
            level=level,
            key=group.key,
            wanted=wanted,
            zones=zones,
            source=group.source,
        )
    if rule is None or doc.get("kind") == "Pod":
        return None
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
        "source": view.source,
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
    by = f" ({view.source})" if view.source else ""
    lines = [
        f"keepTogether {view.level}{by}: {view.fitting} of {total} "
        f"domain{'s' if total != 1 else ''} hold all {view.wanted} pods"
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
