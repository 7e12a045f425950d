"""The per-workload audit as data, a table for people and JSON for scripts. (pure)

One row per workload: its placed pods and nodes, the domains it spans at each position level
(nvlink-domain, network-tier-1/2/3), and the most hops between two of its pods. A level some
of its nodes lack is marked, never counted as one domain: an unlabelled node is somewhere
unknown. Hops that no tier can tell are "unknown", never a guess.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from common.vocabulary import POSITION_LEVELS
from webhook.placement_model.span import Span, span
from webhook.spans.workloads import WorkloadRef, placements

__all__ = ["WorkloadSpan", "to_json", "to_table", "workload_spans"]


@dataclass(frozen=True, slots=True)
class WorkloadSpan:
    ref: WorkloadRef
    span: Span


def workload_spans(
    pods: Iterable[Mapping[str, Any]], labels: Mapping[str, Mapping[str, str]]
) -> list[WorkloadSpan]:
    """Every workload with a placed pod, sorted by namespace, kind and name; `labels` are the
    node labels by node name."""
    return [
        WorkloadSpan(ref, span(nodes, labels)) for ref, nodes in sorted(placements(pods).items())
    ]


def _domains(s: Span, word: str) -> str:
    known, missing = s.domains[word], s.unlabelled[word]
    if not missing:
        return str(known)
    return f"{known}+?" if known else "-"


def _hops(s: Span) -> str:
    if s.max_hops is not None:
        return str(s.max_hops)
    return f"unknown ({s.unknown_pairs} node pairs share no tier)"


def to_table(rows: list[WorkloadSpan]) -> str:
    if not rows:
        return "no running workload pods found\n"
    header = ["NAMESPACE", "KIND", "WORKLOAD", "PODS", "NODES"]
    header += [w.upper() for w in POSITION_LEVELS] + ["MOST HOPS"]
    body = [
        [r.ref.namespace, r.ref.kind, r.ref.name, str(r.span.pods), str(r.span.nodes)]
        + [_domains(r.span, w) for w in POSITION_LEVELS]
        + [_hops(r.span)]
        for r in rows
    ]
    widths = [max(len(line[i]) for line in [header, *body]) for i in range(len(header))]
    lines = [
        "  ".join(c.ljust(w) for c, w in zip(line, widths, strict=True)).rstrip()
        for line in [header, *body]
    ]
    lines.append(
        "domains spanned per level ('-': none of its nodes has that level's label, '+?': "
        "some lack it). "
        "Hops: 0 on one node, 2k-1 when the closest shared tier is k (docs/network-position.md)"
    )
    return "\n".join(lines) + "\n"


def to_json(rows: list[WorkloadSpan]) -> dict[str, Any]:
    return {
        "workloads": [
            {
                "namespace": r.ref.namespace,
                "kind": r.ref.kind,
                "name": r.ref.name,
                "pods": r.span.pods,
                "nodes": r.span.nodes,
                "domains": dict(r.span.domains),
                "unlabelledNodes": dict(r.span.unlabelled),
                "maxHops": r.span.max_hops,
                "unknownHopPairs": r.span.unknown_pairs,
            }
            for r in rows
        ]
    }
