"""GPU↔NIC pairing facts per NUMA node, from the agent's `topoplace.io/topology` annotation.

The annotation holds every GPU and NIC with its NUMA node and PCI address, the agent's
maximum GPU↔NIC matching over PIX/PXB links (`gpuNicPairs`: a GPU's partner) and, when the
agent could read the kubelet's PodResources, which NICs each RDMA device-plugin resource
holds (`rdmaResources`). A NIC that is some GPU's partner is a compute NIC; the rest
(storage, management) are other NICs. nodefit/pairs_check.py judges from these counts.

Two facts decide whether DRA can pair a GPU with a NIC at all (docs/memory-only-numa.md):
how many GPUs share a PCIe root complex with an RDMA NIC (`pcieRoot` alignment needs one;
on Grace each GPU has a root complex of its own), and whether the GPUs' own memory is on NUMA
nodes without CPUs (Grace in NUMA mode: NVIDIA's DRA driver gives that node as the GPU's
`numaNode`, which no NIC shares). The second from NVML's `memoryNuma` where the agent had it,
else from the machine's signature: at least one CPU-less NUMA node holding memory per GPU,
and every GPU alone in its root complex.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

__all__ = ["Pairing", "ResourceNics", "pairing_of"]


@dataclass(frozen=True, slots=True)
class ResourceNics:
    """One RDMA resource's NICs, per NUMA node (in Pairing.numa order)."""

    name: str
    nics: tuple[int, ...]  # NICs the resource holds
    others: tuple[int, ...]  # of them, NICs that are no GPU's partner (storage, management)
    partners: tuple[int, ...]  # GPUs whose partner NIC the resource holds


@dataclass(frozen=True, slots=True)
class Pairing:
    numa: tuple[int, ...]  # NUMA node ids, in order
    gpus: tuple[int, ...]  # GPUs per NUMA node
    # None: the agent could not say (no PodResources); () when it read none
    resources: tuple[ResourceNics, ...] | None
    gpus_beside_nics: int = 0  # GPUs sharing a PCIe root complex with an RDMA NIC
    gpu_memory_numa: bool = False  # the GPUs' own memory on NUMA nodes without CPUs

    def resource(self, name: str) -> ResourceNics | None:
        return next((r for r in self.resources or () if r.name == name), None)


def pairing_of(topo: Mapping[str, Any] | None) -> Pairing | None:
    """The pairing facts of a parsed annotation; None when it lacks them or is malformed."""
    if topo is None:
        return None
    try:
        numa = tuple(sorted(int(n["id"]) for n in topo["numaNodes"]))
        slot = {node: i for i, node in enumerate(numa)}
        gpu_slot = [slot.get(g.get("numa")) for g in topo["gpus"]]
        nic_slot = {str(n["pci"]): slot.get(n.get("numa")) for n in topo["nics"]}
        nic_pci = [str(n["pci"]) for n in topo["nics"]]  # two ports, one function: one PCI
        partner = {int(g): nic_pci[int(n)] for g, n in topo["gpuNicPairs"]}
        gpus = [0] * len(numa)
        for at in gpu_slot:
            if at is not None:
                gpus[at] += 1
        raw = topo.get("rdmaResources")
        resources = None
        if raw is not None:
            resources = tuple(
                _resource(
                    str(entry["resource"]),
                    {str(pci) for pci in entry["nics"]},
                    len(numa),
                    nic_slot,
                    partner,
                    gpu_slot,
                )
                for entry in raw
            )
        beside, own_memory = _dra_facts(topo)
    except (KeyError, TypeError, ValueError, IndexError, AttributeError):
        return None
    if not numa:
        return None
    return Pairing(numa, tuple(gpus), resources, beside, own_memory)


def _dra_facts(topo: Mapping[str, Any]) -> tuple[int, bool]:
    gpus, nics = topo["gpus"], topo["nics"]
    nic_roots = {n.get("rootComplex") for n in nics}
    beside = sum(1 for g in gpus if g.get("rootComplex") in nic_roots)
    if any("memoryNuma" in g for g in gpus):
        return beside, any(g.get("memoryNuma") not in (None, g.get("numa")) for g in gpus)
    memory_only = sum(1 for n in topo["numaNodes"] if not n.get("cpus") and n.get("memoryKiB"))
    roots = [g.get("rootComplex") for g in gpus]
    alone = len(set(roots)) == len(roots) and not set(roots) & nic_roots
    return beside, bool(gpus) and alone and memory_only >= len(gpus)


def _resource(
    name: str,
    held: set[str],
    slots: int,
    nic_slot: Mapping[str, int | None],
    partner: Mapping[int, str],
    gpu_slot: list[int | None],
) -> ResourceNics:
    nics, others, partners = [0] * slots, [0] * slots, [0] * slots
    compute = set(partner.values())
    for pci in held:
        at = nic_slot.get(pci)
        if at is not None:
            nics[at] += 1
            others[at] += pci not in compute
    for gpu, pci in partner.items():
        at = gpu_slot[gpu]
        if pci in held and at is not None:
            partners[at] += 1
    return ResourceNics(name, tuple(nics), tuple(others), tuple(partners))
