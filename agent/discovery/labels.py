"""Labels and the topology annotation, derived from the topology model by pure functions.

Keys come from common.vocabulary (the per-device ones, only with --per-device-labels, from
its gpu_device_labels). Every key and value is checked
against Kubernetes' rules and an invalid one is dropped with a log line: one bad label would
make the API server reject the whole node patch.
"""

from __future__ import annotations

import json
import logging
from collections import Counter
from collections.abc import Mapping

from agent.discovery.links import best_link, worst_link
from agent.discovery.rdma_resources import compute_nics
from agent.discovery.topology import Topology
from common.k8s_names import label_key_problem, label_value_problem, sanitize_label_value
from common.vocabulary import TOPOLOGY_ANNOTATION, Label, dataset_label, gpu_device_labels

__all__ = [
    "derive_labels",
    "per_device_labels",
    "topology_annotations",
    "valid_labels",
]

log = logging.getLogger(__name__)


def _hardware_labels(topo: Topology) -> dict[str, str]:
    labels: dict[str, str] = {}
    if topo.sockets:
        labels[Label.CPU_SOCKETS] = str(len(topo.sockets))
        with_cpus = [n for n in topo.numa_nodes if n.cpus]
        labels[Label.NUMA_NODES] = str(len(with_cpus))
        labels[Label.MAX_CPUS_PER_NUMA_NODE] = str(max((len(n.cpus) for n in with_cpus), default=0))
        # The kubelet aligns a pod's memory with its CPUs, so memory-only nodes do not count;
        # one unreadable node makes the largest unknown.
        memory = [n.memory_kib for n in with_cpus if n.memory_kib is not None]
        if memory and len(memory) == len(with_cpus):
            labels[Label.MAX_MEMORY_GIB_PER_NUMA_NODE] = str(max(memory) // 2**20)
    gpus = topo.gpus
    labels[Label.GPUS] = str(len(gpus))
    numa = [g.place.numa_node for g in gpus]
    if all(n is not None for n in numa):  # one unknown node makes both counts unknown
        per_node = Counter(numa)
        labels[Label.GPU_NUMA_NODES] = str(len(per_node))
        labels[Label.MAX_GPUS_PER_NUMA_NODE] = str(max(per_node.values(), default=0))
    per_switch = Counter(g.place.switch for g in gpus if g.place.switch is not None)
    labels[Label.GPU_PCI_SWITCHES] = str(len(per_switch))
    labels[Label.MAX_GPUS_PER_PCI_SWITCH] = str(max(per_switch.values(), default=0))
    labels[Label.RDMA_NICS] = str(len({n.bdf for n in topo.nics}))
    labels[Label.GPU_NIC_PAIRS] = str(len(topo.pairs))
    if gpus and topo.nics:
        link = worst_link(best_link(row) or "SYS" for row in topo.links)
        if link is not None:
            labels[Label.GPU_NIC_LINK] = link
    nics = _rdma_resource_nics(topo)
    if nics is not None:
        labels[Label.RDMA_RESOURCE_NICS] = nics
    products = {g.product for g in gpus if g.product}
    if len(products) == 1:
        labels[Label.GPU_PRODUCT] = sanitize_label_value(products.pop())
    elif len(products) > 1:
        log.info("GPUs of several products, no product label: %s", ", ".join(sorted(products)))
    return labels


def _rdma_resource_nics(topo: Topology) -> str | None:
    """`compute` when every resource holding a GPU's partner NIC holds only such NICs, `mixed`
    when one holds storage or management NICs too; None when unknown or none holds one."""
    compute = compute_nics(topo)
    holding = [set(nics) for nics in (topo.rdma_resources or {}).values() if compute & set(nics)]
    if not holding:
        return None
    return "compute" if all(nics <= compute for nics in holding) else "mixed"


def _kubelet_labels(topo: Topology) -> dict[str, str]:
    k = topo.kubelet
    fields = {
        Label.CPU_MANAGER_POLICY: k.cpu_manager_policy,
        Label.TOPOLOGY_MANAGER_POLICY: k.topology_manager_policy,
        Label.TOPOLOGY_MANAGER_SCOPE: k.topology_manager_scope,
        Label.MEMORY_MANAGER_POLICY: k.memory_manager_policy,
        Label.TOPOLOGY_MANAGER_PREFER_CLOSEST: k.prefer_closest_numa_nodes,
        Label.TOPOLOGY_MANAGER_MAX_NUMA_NODES: k.max_allowable_numa_nodes,
    }
    return {key: value for key, value in fields.items() if value is not None}


def per_device_labels(topo: Topology) -> dict[str, str]:
    """Per GPU: its NUMA node, its paired NIC and its best NIC link (opt-in: many keys)."""
    labels: dict[str, str] = {}
    for gpu in topo.gpus:
        numa_key, nic_key, link_key = gpu_device_labels(gpu.index)
        if gpu.place.numa_node is not None:
            labels[numa_key] = str(gpu.place.numa_node)
        nic = topo.pairs.get(gpu.index)
        if nic is not None:
            labels[nic_key] = topo.nics[nic].name
        link = best_link(topo.links[gpu.index]) if topo.nics else None
        if link is not None:
            labels[link_key] = link
    return labels


def valid_labels(labels: Mapping[str, str]) -> dict[str, str]:
    """The labels Kubernetes accepts; every other one is dropped with a log line."""
    kept: dict[str, str] = {}
    for key, value in labels.items():
        problem = label_key_problem(key) or label_value_problem(value)
        if problem:
            log.warning("label %s dropped: %s", key, problem, extra={"label": key})
            continue
        kept[key] = value
    return kept


def derive_labels(topo: Topology, *, per_device: bool = False) -> dict[str, str]:
    """Exactly the labels the agent publishes for this topology, sorted by key."""
    labels = _hardware_labels(topo) | _kubelet_labels(topo)
    labels |= {dataset_label(name): version for name, version in topo.datasets.items()}
    if per_device:
        labels |= per_device_labels(topo)
    return dict(sorted(valid_labels(labels).items()))


def topology_annotations(topo: Topology) -> dict[str, str]:
    """{TOPOLOGY_ANNOTATION: compact JSON of the whole topology}."""
    return {TOPOLOGY_ANNOTATION: json.dumps(topo.as_dict(), separators=(",", ":"))}
