"""Node affinity: the policy's placement as required expressions, datasets as preferences.

Required expressions go into EVERY existing nodeSelectorTerm: terms are ORed, so adding to
only one would let the others schedule anywhere. The user's own terms are never dropped.
"""

from __future__ import annotations

from typing import Any

from common.vocabulary import LINK_WORDS, Label, dataset_label
from webhook.engine.patch import clone
from webhook.engine.workers import NumaRequest
from webhook.policy.model import Dataset, Placement

__all__ = ["add_preferred", "add_required", "dataset_preferences", "required_expressions"]

Expression = dict[str, Any]


def required_expressions(
    placement: Placement,
    *,
    gpus: int,
    warnings: list[str],
    devices: bool = True,
    numa: NumaRequest | None = None,
) -> list[Expression]:
    """Match expressions on the agent's node labels for this placement and GPU count.

    `numa` is what the pod asks one NUMA node to hold (workers.numa_request of the mutated
    spec): with singleNumaNode, a node whose largest NUMA node has fewer CPUs or less memory
    is excluded, since its kubelet would refuse the pod with TopologyAffinityError.
    `devices=False` leaves out the GPU/NIC terms (link, pairs, single NUMA node): DRA claims
    enforce those per device, and the node-wide labels would only narrow the choice."""
    exprs: list[Expression] = []
    if not devices:
        placement = _without_device_terms(placement)
    if placement.gpu_nic_link is not None:
        acceptable = LINK_WORDS[: LINK_WORDS.index(placement.gpu_nic_link) + 1]
        exprs.append(_expr(Label.GPU_NIC_LINK, "In", list(acceptable)))
    for wanted, key, field in (
        (placement.gpu_nic_pairs, Label.GPU_NIC_PAIRS, "gpuNicPairs"),
        (placement.single_numa_node, Label.MAX_GPUS_PER_NUMA_NODE, "singleNumaNode"),
    ):
        if not wanted:
            continue
        if gpus <= 0:
            warnings.append(f"placement.{field} skipped: the pod requests no GPU")
            continue
        # Node labels are integers: "at least N" is "Gt N-1".
        exprs.append(_expr(key, "Gt", [str(gpus - 1)]))
        if key == Label.MAX_GPUS_PER_NUMA_NODE and numa is not None:
            for need, numa_key in (
                (numa.cpus, Label.MAX_CPUS_PER_NUMA_NODE),
                (numa.memory_gib, Label.MAX_MEMORY_GIB_PER_NUMA_NODE),
            ):
                if need > 0:
                    exprs.append(_expr(numa_key, "Gt", [str(need - 1)]))
    if placement.topology_manager_policies:
        exprs.append(
            _expr(Label.TOPOLOGY_MANAGER_POLICY, "In", list(placement.topology_manager_policies))
        )
    for key, value in placement.required_labels.items():
        exprs.append(_expr(key, "In", [value]))
    return exprs


def _without_device_terms(placement: Placement) -> Placement:
    return placement.model_copy(
        update={"gpu_nic_link": None, "gpu_nic_pairs": False, "single_numa_node": False}
    )


def dataset_preferences(datasets: list[Dataset]) -> list[dict[str, Any]]:
    """Preferred terms for nodes already holding each dataset version."""
    return [
        {
            "weight": d.prefer_weight,
            "preference": {"matchExpressions": [_expr(dataset_label(d.name), "In", [d.version])]},
        }
        for d in datasets
    ]


def add_required(spec: dict[str, Any], exprs: list[Expression]) -> None:
    """Add `exprs` to every nodeSelectorTerm. Takes ownership of `exprs` (pass fresh ones):
    the first use stores them as they are, each further term gets its own copies."""
    if not exprs:
        return
    node_affinity = _child(_child(spec, "affinity"), "nodeAffinity")
    required = _child(node_affinity, "requiredDuringSchedulingIgnoredDuringExecution")
    terms = required.get("nodeSelectorTerms")
    if not terms:
        required["nodeSelectorTerms"] = [{"matchExpressions": exprs}]
        return
    owned = True  # no term holds `exprs` yet
    for term in terms:
        existing = term.get("matchExpressions") or []
        have = {_key(e) for e in existing}
        added = [e for e in exprs if _key(e) not in have]
        if added:
            term["matchExpressions"] = [*existing, *(added if owned else map(clone, added))]
            owned = False


def add_preferred(spec: dict[str, Any], terms: list[dict[str, Any]]) -> None:
    """Append the `terms` not already present. Takes ownership of `terms` (pass fresh ones)."""
    if not terms:
        return
    node_affinity = _child(_child(spec, "affinity"), "nodeAffinity")
    preferred = node_affinity.get("preferredDuringSchedulingIgnoredDuringExecution") or []
    new = [t for t in terms if t not in preferred]
    if new:
        node_affinity["preferredDuringSchedulingIgnoredDuringExecution"] = [*preferred, *new]


def _expr(key: str, operator: str, values: list[str]) -> Expression:
    return {"key": key, "operator": operator, "values": values}


def _key(expr: Expression) -> tuple[Any, Any, tuple[str, ...]]:
    return (expr.get("key"), expr.get("operator"), tuple(sorted(expr.get("values") or ())))


def _child(parent: dict[str, Any], key: str) -> dict[str, Any]:
    """parent[key] as a dict, created when absent or null."""
    value = parent.get(key)
    if not isinstance(value, dict):
        value = {}
        parent[key] = value
    return value
