"""Are the GPU↔NIC pairs a policy asks for guaranteed on this node's path? (pure)

What a real kubelet v1.37.2 did (make cluster; docs/policies.md "What each path
guarantees"): the Topology Manager aligns NUMA nodes, then the device manager takes any free
devices of the chosen NUMA nodes, in no order we can rely on; it knows nothing of PCIe
switches. So on the device-plugin path a pod holds each GPU's partner NIC only when it takes
every NIC its RDMA resource holds on the NUMA nodes its GPUs land on, and every GPU there has
its partner in that resource. A DRA claim that aligns GPU and NIC on `pcieRoot` pairs always.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from webhook.nodefit.checks import PodPlan
from webhook.placement_model.kubelet import config_from_labels
from webhook.placement_model.merge import min_nodes
from webhook.placement_model.pairing import Pairing, ResourceNics
from webhook.policy.model import REFUSING_TOPOLOGY_POLICIES, PlacementPolicy
from webhook.policy.notes import asks_pairs

__all__ = ["OPTION", "PairsVerdict", "pairs_key", "pairs_verdict"]

OPTION = "resources.rdma.wholeNumaNodes"


@dataclass(frozen=True, slots=True)
class PairsVerdict:
    """`facts`: what decides it on this node, short enough for a warning; `text`: in full."""

    guaranteed: bool
    path: str  # "device-plugin" or "DRA"
    facts: str
    remedy: str = ""  # what would make pairs hold ("" when they do, or nothing would)
    numa_aligned: bool = False  # the kubelet puts the NICs on the GPUs' NUMA nodes, no nearer

    @property
    def text(self) -> str:
        if self.guaranteed:
            return f"{self.path} path: {self.facts}"
        aligned = "NICs are NUMA-aligned only; " if self.numa_aligned else ""
        tail = f"; {self.remedy}" if self.remedy else ""
        return f"{self.path} path: {aligned}{self.facts}{tail}"


def pairs_verdict(
    policy: PlacementPolicy | None,
    plan: PodPlan,
    labels: Mapping[str, str],
    pairing: Pairing | None,
) -> PairsVerdict | None:
    """The verdict for one node; None when the policy asks for no pairs or the pod has no GPU."""
    if policy is None or not asks_pairs(policy):
        return None
    dra = policy.spec.dra
    if plan.gpus == 0:
        if dra is None:
            return None
        unmatched = _dra_unmatched(dra.align, pairing) if dra.nic is not None else None
        if unmatched is not None:
            return PairsVerdict(False, "DRA", unmatched, _DRA_ON_GRACE)
        if dra.nic is not None and dra.align == "pcieRoot":
            return PairsVerdict(True, "DRA", "each GPU's claim takes a NIC on its PCIe root")
        what = "claims take no NIC (spec.dra.nic)" if dra.nic is None else "align: numaNode"
        return PairsVerdict(
            False, "DRA", f"{what}: GPUs need not get their partner NICs",
            "pairs need spec.dra.nic with align: pcieRoot",
        )  # fmt: skip
    rdma = policy.spec.resources.rdma
    remedy = "pairs need spec.dra" + ("" if rdma and rdma.whole_numa_nodes else f" or {OPTION}")
    if rdma is None:
        facts = "the pod requests no RDMA NIC (resources.rdma)"
        return PairsVerdict(False, "device-plugin", facts, "pairs need resources.rdma or spec.dra")
    problem = _node_problem(labels, pairing, rdma.resource)
    nics = pairing.resource(rdma.resource) if pairing is not None else None
    if problem is not None or pairing is None or nics is None:
        return PairsVerdict(False, "device-plugin", problem or "no GPU↔NIC facts", remedy)
    pod_scope = config_from_labels(labels).scope == "pod"
    held: list[str] = []
    containers = [u.amounts for u in plan.units.container]
    for unit in (plan.requests,) if pod_scope else containers:
        gpus, count = unit.get(plan.gpu_resource, 0), unit.get(rdma.resource, 0)
        if gpus <= 0:
            continue
        if count <= 0:
            facts = f"a container with {gpus} GPUs requests no {rdma.resource}"
            return PairsVerdict(False, "device-plugin", facts, remedy)
        judged = _unit(gpus, count, pairing, nics)
        if judged is None:
            continue
        facts, ok = judged
        if not ok:
            return PairsVerdict(False, "device-plugin", facts, remedy, numa_aligned=True)
        held.append(facts)
    if not held:
        return None  # the GPUs do not fit the node at all: other checks say so
    return PairsVerdict(True, "device-plugin", "; ".join(held))


_DRA_ON_GRACE = (
    "take NICs by resources.rdma there, which the kubelet aligns by NUMA node "
    "(docs/memory-only-numa.md)"
)


def _dra_unmatched(align: str, pairing: Pairing | None) -> str | None:
    """Why no GPU/NIC claim pair can be allocated on this node, or None."""
    if pairing is None or not any(pairing.gpus):
        return None
    if align == "pcieRoot" and pairing.gpus_beside_nics == 0:
        return (
            "no GPU shares a PCIe root with an RDMA NIC here (each GPU has a root complex of "
            "its own, as on Grace): claims aligning GPU and NIC on pcieRoot cannot be allocated"
        )
    if align == "numaNode" and pairing.gpu_memory_numa:
        return (
            "the GPUs' memory is on NUMA nodes without CPUs (Grace in NUMA mode), which NVIDIA's "
            "DRA driver gives as each GPU's numaNode and no NIC shares: claims aligning on "
            "numaNode cannot be allocated"
        )
    return None


def pairs_key(labels: Mapping[str, str], pairing: Pairing | None) -> tuple[object, ...]:
    """Everything of a node pairs_verdict reads: nodes with equal keys get the same verdict."""
    config = config_from_labels(labels)
    return (config.policy, config.scope, config.unknown, pairing)


def _node_problem(labels: Mapping[str, str], pairing: Pairing | None, resource: str) -> str | None:
    config = config_from_labels(labels)  # the placement model's reading of the kubelet
    if config.policy not in REFUSING_TOPOLOGY_POLICIES:
        said = config.unknown or f"topology-manager-policy {config.policy}"
        return f"{said}: the kubelet need not put NICs on the GPUs' NUMA nodes"
    if pairing is None:
        return "no GPU↔NIC facts in the node's topology annotation"
    if pairing.resources is None:
        return f"which NICs {resource} holds is not known (the agent reads PodResources)"
    if pairing.resource(resource) is None:
        return f"the kubelet lists no RDMA NIC of {resource}"
    return None


def _where(nodes: Sequence[int]) -> str:
    return "NUMA " + ",".join(map(str, nodes))


def _unit(gpus: int, count: int, pairing: Pairing, nics: ResourceNics) -> tuple[str, bool] | None:
    """(facts, guaranteed) for one aligned unit of `gpus` GPUs and `count` NICs; None when
    no NUMA set can hold it (the kubelet refuses the pod: the topology check says so)."""
    width = min_nodes(gpus, pairing.gpus)
    if width is None:
        return None
    sets = [
        chosen
        for chosen in itertools.combinations(range(len(pairing.numa)), width)
        if sum(pairing.gpus[i] for i in chosen) >= gpus
        and sum(nics.nics[i] for i in chosen) >= count
    ]
    for chosen in sets:  # any of these the kubelet may choose
        where = _where([pairing.numa[i] for i in chosen])
        on_gpus = sum(pairing.gpus[i] for i in chosen)
        on_nics = sum(nics.nics[i] for i in chosen)
        lacking = on_gpus - sum(nics.partners[i] for i in chosen)
        if lacking:
            return f"{lacking} of {on_gpus} GPUs on {where} have no partner in {nics.name}", False
        if count < on_nics:
            others = sum(nics.others[i] for i in chosen)
            extra = f" ({others} storage/management)" if others else ""
            return (
                f"{gpus} of {on_gpus} GPUs on {where} get {count} of its {on_nics} "
                f"{nics.name} NICs{extra}",
                False,
            )
    if not sets:
        return None
    nodes = "NUMA node" + ("s" if width > 1 else "")
    return (
        f"the pod takes every {nics.name} NIC of the {nodes} its {gpus} GPUs take, "
        "each GPU's partner among them",
        True,
    )
