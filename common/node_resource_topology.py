"""The NodeResourceTopology API's names (topology.node.k8s.io/v1alpha2, as NFD's
topology-updater and scheduler-plugins use them): the agent writes the objects, the webhook
reads them, and both must spell the API and its attributes the same way."""

from __future__ import annotations

from typing import Final

__all__ = ["GROUP", "KIND", "PLURAL", "POLICY_ATTRIBUTE", "SCOPE_ATTRIBUTE", "VERSION"]

GROUP: Final = "topology.node.k8s.io"
VERSION: Final = "v1alpha2"
PLURAL: Final = "noderesourcetopologies"
KIND: Final = "NodeResourceTopology"

# The kubelet's Topology Manager settings, under the attribute names NFD writes.
POLICY_ATTRIBUTE: Final = "topologyManagerPolicy"
SCOPE_ATTRIBUTE: Final = "topologyManagerScope"
