"""Notes on valid policies: what they ask for that not every path can deliver. (pure)

`validate` prints them; they never make a policy set invalid.
"""

from __future__ import annotations

from webhook.policy.loader import PolicySet
from webhook.policy.model import PlacementPolicy

__all__ = ["asks_pairs", "policy_notes"]

_PAIRING_LINKS = ("PIX", "PXB")


def asks_pairs(policy: PlacementPolicy) -> bool:
    """gpuNicPairs; or a gpuNicLink of PIX/PXB for NICs the pod requests (resources.rdma), which
    only a GPU's partner NIC can meet. A link alone is a node property: the pod may reach its
    NICs some other way (host network, a shared RDMA device)."""
    placement = policy.spec.placement
    link = placement.gpu_nic_link in _PAIRING_LINKS and policy.spec.resources.rdma is not None
    return placement.gpu_nic_pairs or link


def policy_notes(policies: PolicySet) -> list[str]:
    """One line per note, naming the policy and where it is defined."""
    notes = []
    for name in policies.names:
        policy = policies[name]
        if asks_pairs(policy) and policy.spec.dra is None:
            notes.append(
                f"{policies.origins[name]}: policy {name} asks for GPU↔NIC pairs without "
                "spec.dra: on the device-plugin path they hold only when a pod takes every NIC "
                "of its RDMA resource on its GPUs' NUMA nodes (docs/policies.md, What each path "
                "guarantees)"
            )
    return notes
