"""Positions other tools already wrote on the Node: read, never written.

AWS (`topology.k8s.aws/network-node-layer-N`, layer 3 closest), GKE
(`cloud.google.com/gce-topology-{block,subblock}`), topograph (`fabric.topograph.run/tier-N`,
tier 0 closest; `accelerator.topograph.run/domain`) and GPU Feature Discovery
(`nvidia.com/gpu.clique`). The first tool that says anything gives the tiers; the NVLink
domain comes from GFD, else topograph.
"""

from __future__ import annotations

from collections.abc import Mapping

from agent.position.model import Tiers
from common.vocabulary import ForeignLabel

__all__ = ["foreign_domain", "foreign_tiers"]


def _tiers(source: str, labels: Mapping[str, str], closest_first: tuple[str, ...]) -> Tiers:
    ids = [labels.get(key) or None for key in closest_first]
    return Tiers(source, (ids[0], ids[1], ids[2]))


def foreign_tiers(labels: Mapping[str, str]) -> Tiers | None:
    aws = ForeignLabel.AWS_NETWORK_LAYERS
    candidates = (
        _tiers("AWS labels", labels, (aws[2], aws[1], aws[0])),
        _tiers("GKE labels", labels, (ForeignLabel.GKE_SUBBLOCK, ForeignLabel.GKE_BLOCK, "")),
        _tiers("topograph labels", labels, ForeignLabel.TOPOGRAPH_TIERS),
    )
    return next((t for t in candidates if t.known), None)


def foreign_domain(labels: Mapping[str, str]) -> tuple[str, str] | None:
    """(source, NVLink domain) from a label already on the node."""
    for source, key in (
        ("GFD label", ForeignLabel.GFD_CLIQUE),
        ("topograph label", ForeignLabel.TOPOGRAPH_DOMAIN),
    ):
        if labels.get(key):
            return source, labels[key]
    return None
