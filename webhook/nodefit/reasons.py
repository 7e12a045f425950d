"""Reasons in topology words, derived from the label contract (common/vocabulary.py).

Each label key has a kind: a count ("4 GPUs per NUMA node; pod needs 8", "125 GiB memory per
NUMA node; pod needs 192"), the link word
("gpu-nic-link is NODE; policy needs PIX or PXB"), a kubelet policy word
("topology-manager-policy none; policy needs …"), a dataset version, or any other label.
An absent label is explained by what the contract says about when the agent omits it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from common.kubelet_contract import KUBELET_LABELS
from common.vocabulary import DATASET_PREFIX, LABEL_PREFIX, Label, is_owned_key
from webhook.placement_model.filters.selectors import Requirement, parse_int64

__all__ = ["AGENT_MISSING", "describe", "describe_preferred", "has_agent_labels", "or_list"]

AGENT_MISSING = "no topoplace labels (is topoplace-agent running on it?)"

# Integer labels and what their number counts (singular, plural).
_COUNTS = {
    Label.CPU_SOCKETS: ("CPU socket", "CPU sockets"),
    Label.NUMA_NODES: ("NUMA node", "NUMA nodes"),
    Label.GPUS: ("GPU", "GPUs"),
    Label.GPU_NUMA_NODES: ("NUMA node with GPUs", "NUMA nodes with GPUs"),
    Label.MAX_GPUS_PER_NUMA_NODE: ("GPU per NUMA node", "GPUs per NUMA node"),
    Label.MAX_CPUS_PER_NUMA_NODE: ("CPU per NUMA node", "CPUs per NUMA node"),
    Label.MAX_MEMORY_GIB_PER_NUMA_NODE: ("GiB memory per NUMA node", "GiB memory per NUMA node"),
    Label.GPU_PCI_SWITCHES: ("PCIe switch with GPUs", "PCIe switches with GPUs"),
    Label.MAX_GPUS_PER_PCI_SWITCH: ("GPU per PCIe switch", "GPUs per PCIe switch"),
    Label.RDMA_NICS: ("RDMA NIC", "RDMA NICs"),
    Label.GPU_NIC_PAIRS: ("GPU-NIC pair", "GPU-NIC pairs"),
}
# Counts of GPUs or of what GPUs pair with: on a node without GPUs, "no GPU" says it all.
_GPU_COUNTS = (
    Label.GPU_NUMA_NODES,
    Label.MAX_GPUS_PER_NUMA_NODE,
    Label.GPU_PCI_SWITCHES,
    Label.MAX_GPUS_PER_PCI_SWITCH,
    Label.GPU_NIC_PAIRS,
)
# Labels read from the kubelet config file: absent when the agent could not read it.
_KUBELET = KUBELET_LABELS
# Omitted by the agent when the GPUs' NUMA nodes are unknown.
_NUMA_UNKNOWN = (Label.GPU_NUMA_NODES, Label.MAX_GPUS_PER_NUMA_NODE)


def has_agent_labels(labels: Mapping[str, str]) -> bool:
    return any(is_owned_key(key) and key.startswith(LABEL_PREFIX) for key in labels)


def or_list(values: Sequence[str]) -> str:
    if len(values) <= 2:
        return " or ".join(values)
    return ", ".join(values[:-1]) + f" or {values[-1]}"


def _name(key: str) -> str:
    if key.startswith(DATASET_PREFIX):
        return f"dataset {key.removeprefix(DATASET_PREFIX)}"
    return key.removeprefix(LABEL_PREFIX)


def _absent(key: str, labels: Mapping[str, str]) -> str:
    """Why the agent would not have published `key` on this node, per the label contract."""
    if key.startswith(DATASET_PREFIX):
        return f"{_name(key)} not cached"
    if not key.startswith(LABEL_PREFIX):
        return f"no label {key}"
    if not has_agent_labels(labels):
        return AGENT_MISSING
    name = _name(key)
    if key == Label.GPU_NIC_LINK:
        if labels.get(Label.GPUS) == "0":
            return f"no GPU ({name} absent)"
        if labels.get(Label.RDMA_NICS) == "0":
            return f"no RDMA NIC ({name} absent)"
    if key in _NUMA_UNKNOWN:
        return f"GPUs' NUMA nodes unknown ({name} absent)"
    if key == Label.MAX_MEMORY_GIB_PER_NUMA_NODE:
        return f"NUMA nodes' memory unknown ({name} absent)"
    if key == Label.MAX_CPUS_PER_NUMA_NODE:
        return f"CPU topology unknown ({name} absent)"
    if key in _KUBELET:
        return f"{name} unknown (the agent could not read the kubelet config)"
    if key == Label.GPU_PRODUCT:
        return f"{name} unknown (NVML did not answer)"
    return f"no {name} label"


def _have(key: str, value: str, labels: Mapping[str, str]) -> str:
    if key in _GPU_COUNTS and labels.get(Label.GPUS) == "0":
        return "no GPU"
    if key in _COUNTS:
        singular, plural = _COUNTS[key]
        return f"{value} {singular if value == '1' else plural}"
    if key in _KUBELET:
        return f"{_name(key)} {value}"
    if key.startswith(DATASET_PREFIX):
        return f"{_name(key)} cached at version {value}"
    return f"{_name(key)} is {value}"


def _wanted(req: Requirement, who: str, need: int | None) -> str:
    op, values = req.operator, list(req.values)
    if op == "In":
        return f"{who} needs {or_list(values)}"
    if op == "NotIn":
        return f"{who} excludes {or_list(values)}"
    if op == "Exists":
        return f"{who} needs the label"
    if op == "DoesNotExist":
        return f"{who} needs it absent"
    number = req.number
    if op == "Gt" and need is not None and number == need - 1:
        return f"pod needs {need}"  # our own "at least what the pod needs"
    return f"{who} needs {'more' if op == 'Gt' else 'fewer'} than {number}"


def describe(
    req: Requirement,
    labels: Mapping[str, str],
    name: str,
    *,
    who: str,
    need: int | None = None,
) -> str:
    """Why `req` fails on a node with `labels` (and `name`), e.g. '4 GPUs per NUMA node; pod
    needs 8'. `who` is whose requirement it is ("policy", "node affinity", "nodeSelector");
    `need` the count a policy's "at least" asks for (GPUs, CPUs, GiB)."""
    if req.error is not None:
        return f"{who} expression on {req.key} is invalid: {req.error}"
    if req.field:
        return f"node name {name}; {_wanted(req, who, None)}"
    value = labels.get(req.key)
    if value is None:
        return f"{_absent(req.key, labels)}; {_wanted(req, who, need)}"
    if req.operator in ("Gt", "Lt") and parse_int64(value) is None:
        return f"{_name(req.key)} is {value!r}, not an integer; {_wanted(req, who, need)}"
    return f"{_have(req.key, value, labels)}; {_wanted(req, who, need)}"


def describe_preferred(reqs: Sequence[Requirement]) -> str:
    """A matched preferred term in words: 'dataset imagenet 2024-06 cached'."""
    parts = []
    for req in reqs:
        if req.key.startswith(DATASET_PREFIX) and req.operator == "In" and len(req.values) == 1:
            parts.append(f"{_name(req.key)} {req.values[0]} cached")
        elif req.operator in ("Exists", "DoesNotExist"):
            parts.append(f"{_name(req.key)} {req.operator}")
        else:
            parts.append(f"{_name(req.key)} {req.operator} {','.join(req.values)}")
    return ", ".join(parts)
