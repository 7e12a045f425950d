"""DRA on Grace (docs/memory-only-numa.md): on a GB200 tray no GPU shares a PCIe root with a
NIC, and NVIDIA's DRA driver gives a GPU's HBM node as its `numaNode`
(kubernetes-sigs/dra-driver-nvidia-gpu#1242), so claims that pair GPU and NIC on either
attribute cannot be allocated there. explain and `validate` say so; elsewhere nothing changes.
The nodes are the fixture machines as the agent labels them."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from agent.discovery.discover import DiscoveryOptions, discover
from common.vocabulary import TOPOLOGY_ANNOTATION
from tests.agent.discovery.machines import build
from tests.webhook.nodefit.test_pairs import explain, policies
from webhook.placement_model.pairing import pairing_of
from webhook.policy.notes import policy_notes

DRA = ("  dra: {gpu: {deviceClassName: gpu.nvidia.com}, nic: {deviceClassName: dranet}, "
       "align: ALIGN, gpuCounts: [1, 2, 4]}\n")  # fmt: skip


@pytest.fixture(scope="module")
def nodes(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, Any]]:
    root = tmp_path_factory.mktemp("grace")
    out = {}
    for machine in ("gb200-tray", "gh200", "cxl-server", "dgx-h100", "hyperv-gpu-vm"):
        found = discover(DiscoveryOptions(sysfs_root=build(machine, root / machine),
                                          dataset_root=root / "none", use_nvml=False))  # fmt: skip
        out[machine] = {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {
                "name": machine,
                "labels": {"kubernetes.io/hostname": machine, **found.labels},
                "annotations": {TOPOLOGY_ANNOTATION: found.annotations[TOPOLOGY_ANNOTATION]},
            },
            "status": {"allocatable": {"cpu": "100", "memory": "1000Gi", "pods": "110"}},
        }
    return out


def _topology(node: dict[str, Any]) -> dict[str, Any]:
    return json.loads(node["metadata"]["annotations"][TOPOLOGY_ANNOTATION])


@pytest.mark.parametrize(
    ("machine", "beside", "own_memory"),
    [
        ("gb200-tray", 0, True),  # every GPU alone in its PCI domain; 4 HBM nodes, 4 GPUs
        ("gh200", 0, True),
        ("cxl-server", 4, False),  # one CXL node: memory-only, but not the GPUs'
        ("dgx-h100", 8, False),
        ("hyperv-gpu-vm", 0, False),  # own domains too, but no memory-only NUMA node
    ],
)
def test_the_dra_facts_of_each_machine(
    machine: str, beside: int, own_memory: bool, nodes: dict[str, dict[str, Any]]
) -> None:
    pairing = pairing_of(_topology(nodes[machine]))
    assert pairing is not None
    assert (pairing.gpus_beside_nics, pairing.gpu_memory_numa) == (beside, own_memory)


def test_nvmls_memory_numa_decides_where_the_agent_had_it(
    nodes: dict[str, dict[str, Any]],
) -> None:
    topo = _topology(nodes["gb200-tray"])
    for gpu, hbm in zip(topo["gpus"], (2, 10, 18, 26), strict=True):
        gpu["memoryNuma"] = hbm
    assert pairing_of(topo).gpu_memory_numa  # type: ignore[union-attr]
    for gpu in topo["gpus"]:
        gpu["memoryNuma"] = gpu["numa"]  # a driver in CDMM mode: the memory is the GPU's own
    assert not pairing_of(topo).gpu_memory_numa  # type: ignore[union-attr]


@pytest.mark.parametrize(("align", "words"), [
    ("pcieRoot", "no GPU shares a PCIe root with an RDMA NIC here"),
    ("numaNode", "the GPUs' memory is on NUMA nodes without CPUs"),
])  # fmt: skip
def test_explain_says_claims_cannot_pair_on_a_gb200_tray(
    align: str, words: str, tmp_path: Path, nodes: dict[str, dict[str, Any]]
) -> None:
    found = policies(tmp_path, "{resource: rdma/ib}", dra=DRA.replace("ALIGN", align))
    by_node = {n.node: n.pairs for n in explain(found, 4, list(nodes.values())).nodes}
    grace = by_node["gb200-tray"]
    assert grace is not None and not grace.guaranteed and words in grace.text
    assert "resources.rdma" in grace.remedy
    if align == "pcieRoot":  # an HGX board still pairs on its switches
        assert by_node["dgx-h100"] is not None and by_node["dgx-h100"].guaranteed


def test_validate_notes_grace_for_every_dra_policy_with_nics(tmp_path: Path) -> None:
    found = policies(tmp_path, "{resource: rdma/ib}", dra=DRA.replace("ALIGN", "numaNode"))
    grace = [n for n in policy_notes(found) if "Grace" in n]
    assert len(grace) == 1 and "aligns GPU and NIC claims on numaNode" in grace[0]


def test_explain_recommends_max_allowable_numa_nodes_where_the_kubelet_needs_it(
    tmp_path: Path, nodes: dict[str, dict[str, Any]]
) -> None:
    """The fixtures' kubelets run the default policy `none` (no config file read): a GB200
    tray (34 NUMA nodes) and a GH200 (9) could not run an aligning one without the option."""
    found = policies(tmp_path, "{resource: rdma/ib}")
    notes = {n.node: n.notes for n in explain(found, 1, list(nodes.values())).nodes}
    assert notes["gb200-tray"] == (
        "34 NUMA nodes (32 without CPUs): a restricted or single-numa-node kubelet starts here "
        "only with max-allowable-numa-nodes 34 or more",
    )
    assert "max-allowable-numa-nodes 9 or more" in notes["gh200"][0]
    assert notes["cxl-server"] == notes["dgx-h100"] == ()
