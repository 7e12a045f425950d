"""The NodeResourceTopology API's names (topology.node.k8s.io/v1alpha2, as NFD's
topology-updater and scheduler-plugins use them): the agent writes the objects, the webhook
reads them, and both must spell the API and its attributes the same way."""

from __future__ import annotations

from typing import Final

__all__ = [
    "GROUP",
    "KIND",
    "PLURAL",
    "POLICY_ATTRIBUTE",
    "REMOTE_ACCESS_ATTRIBUTE",
    "SCOPE_ATTRIBUTE",
    "VERSION",
]

GROUP: Final = "topology.node.k8s.io"
VERSION: Final = "v1alpha2"
PLURAL: Final = "noderesourcetopologies"
KIND: Final = "NodeResourceTopology"

# The kubelet's Topology Manager settings, under the attribute names NFD writes.
POLICY_ATTRIBUTE: Final = "topologyManagerPolicy"
SCOPE_ATTRIBUTE: Final = "topologyManagerScope"

# A zone's recent remote-allocation share, a whole percent in steps of 5 (numastat other_node
# over local_node + other_node for the pages allocated on that NUMA node in the last minute).
# Topoplace's own: the agent writes it on each zone, the extender's prioritize reads it.
REMOTE_ACCESS_ATTRIBUTE: Final = "topoplace.io/remote-access-percent"
