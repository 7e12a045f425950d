"""Notes on valid policies: what they ask for that not every path can deliver. (pure)

`validate` prints them; they never make a policy set invalid.
"""

from __future__ import annotations

from webhook.policy.loader import PolicySet
from webhook.policy.model import REFUSING_TOPOLOGY_POLICIES, PlacementPolicy
from webhook.policy.quantity import format_cpu, format_memory, parse_quantity

__all__ = ["asks_pairs", "policy_notes"]

_PAIRING_LINKS = ("PIX", "PXB")
_SHOWN_GPUS = (1, 2, 4, 8)


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
        dra = policy.spec.dra
        if dra is not None and dra.nic is not None:
            notes.append(
                f"{policies.origins[name]}: policy {name} aligns GPU and NIC claims on "
                f"{dra.align}: on Grace machines (GH200, GB200) neither pcieRoot nor numaNode "
                "pairs them (each GPU has a PCIe root of its own; NVIDIA's DRA driver gives a "
                "GPU's HBM node as its numaNode), so such nodes never allocate these claims "
                "(docs/memory-only-numa.md)"
            )
        shapes = _kubelet_shapes(policy)
        if shapes is not None:
            notes.append(f"{policies.origins[name]}: policy {name} {shapes}")
    return notes


def _per_worker(policy: PlacementPolicy, gpus: int) -> str:
    resources = policy.spec.resources
    share = resources.whole_numa_nodes
    parts = []
    for name, per_gpu, per_numa in (
        ("cpu", resources.cpu_per_gpu, share.cpu if share else None),
        ("memory", resources.memory_per_gpu, share.memory if share else None),
    ):
        if per_numa is not None and share is not None:
            total = parse_quantity(per_numa) * -(-gpus // share.gpus)
        elif per_gpu is not None:
            total = parse_quantity(per_gpu) * gpus
        else:
            continue
        parts.append(format_cpu(total) + " CPUs" if name == "cpu" else format_memory(total))
    return f"{gpus} GPU{'s' if gpus != 1 else ''}: {', '.join(parts) or 'as the pod sets'}"


def _kubelet_shapes(policy: PlacementPolicy) -> str | None:
    """What a policy that lets pods meet aligning kubelets will do about them."""
    listed = policy.spec.placement.topology_manager_policies or []
    aligning = [p for p in listed if p in REFUSING_TOPOLOGY_POLICIES]
    if not aligning:
        return None
    shown = "; ".join(_per_worker(policy, n) for n in _SHOWN_GPUS)
    return (
        f"lets pods meet {' and '.join(aligning)} kubelets: each pod's node affinity keeps it "
        "to the node shapes whose kubelet admits it, and it waits Pending where none does "
        f"(docs/policies.md, Kubelet-shape terms); a worker gets {shown}"
    )
