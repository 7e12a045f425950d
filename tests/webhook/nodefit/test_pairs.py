"""GPU↔NIC pairs on each node's path, as explain and the admission warning state them.

The nodes are DGX H100s as the agent labels them after asking a PodResources server (the
real gRPC protocol) what the RDMA device plugin offers: 8 GPUs, 4 per NUMA node, each with a
partner NIC under its PCIe switch, plus 2 storage NICs per NUMA node."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from tests.webhook.nodefit.pair_nodes import COMPUTE, STORAGE, dgx_h100
from webhook.cli.explain.render import to_json, to_table
from webhook.engine.recipe import mutate
from webhook.nodefit.checks import plan_for
from webhook.nodefit.explanation import Explanation, explain_pod
from webhook.nodefit.node_index import NodeIndex
from webhook.placement_model.filters.nodes import NodeView
from webhook.policy.loader import PolicySet, load_policy_dir
from webhook.stores.node_store import NodeStore
from webhook.warnings.lines import LIMIT
from webhook.warnings.placement import PlacementWarnings

MIXED = {"rdma/ib": COMPUTE + STORAGE}  # one resource of every RDMA function, as e2e's plugin
SPLIT = {"rdma/compute": COMPUTE, "rdma/storage": STORAGE}


def policies(tmp_path: Path, rdma: str, *, link: str = "PIX", dra: str = "") -> PolicySet:
    (tmp_path / "p.yaml").write_text(f"""
apiVersion: topoplace.io/v1alpha1
kind: PlacementPolicy
metadata: {{name: pix}}
spec:
  namespaces: [ml]
  placement: {{gpuNicLink: {link}, gpuNicPairs: true, topologyManagerPolicies: [restricted]}}
  resources: {{cpuPerGpu: 12, memoryPerGpu: 96Gi, rdma: {rdma}}}
{dra}""")
    return load_policy_dir(tmp_path)


def pod(gpus: int) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": f"train-{gpus}", "labels": {"topoplace.io/policy": "pix"}},
        "spec": {"containers": [{"name": "t", "image": "t",
                                 "resources": {"limits": {"nvidia.com/gpu": str(gpus)}}}]},
    }  # fmt: skip


def explain(found: PolicySet, gpus: int, nodes: Sequence[dict[str, Any]]) -> Explanation:
    return explain_pod(pod(gpus), "ml", found, [NodeView.from_object(n) for n in nodes])


def pairs_of(explanation: Explanation) -> dict[str, Any]:
    return {n["node"]: n["pairs"] for n in to_json(explanation)["nodes"]}


@pytest.fixture(scope="module")
def mixed() -> dict[str, Any]:
    return dgx_h100("dgx-mixed", MIXED)


@pytest.fixture(scope="module")
def split() -> dict[str, Any]:
    return dgx_h100("dgx-split", SPLIT)


def test_a_resource_with_storage_nics_does_not_pair_even_a_numa_node_of_gpus(
    tmp_path: Path, mixed: dict[str, Any]
) -> None:
    found = explain(policies(tmp_path, "{resource: rdma/ib}"), 4, [mixed])
    node = found.nodes[0]
    assert node.fits  # it runs: only the pairs are not promised
    assert pairs_of(found)["dgx-mixed"] == {
        "guaranteed": False,
        "path": "device-plugin",
        "reason": "device-plugin path: NICs are NUMA-aligned only; 4 of 4 GPUs on NUMA 0 get 4 "
        "of its 6 rdma/ib NICs (2 storage/management); pairs "
        "need spec.dra or resources.rdma.wholeNumaNodes",
    }


def test_a_compute_only_resource_pairs_whole_numa_nodes_but_not_part_of_one(
    tmp_path: Path, split: dict[str, Any]
) -> None:
    found = policies(tmp_path, "{resource: rdma/compute}")
    whole = pairs_of(explain(found, 4, [split]))["dgx-split"]
    assert whole["guaranteed"], whole
    assert "takes every rdma/compute NIC of the NUMA node its 4 GPUs take" in whole["reason"]
    assert pairs_of(explain(found, 8, [split]))["dgx-split"]["guaranteed"]
    part = pairs_of(explain(found, 2, [split]))["dgx-split"]
    assert not part["guaranteed"]
    assert "2 of 4 GPUs on NUMA 0 get 2 of its 4 rdma/compute NICs; pairs need" in (part["reason"])


@pytest.mark.parametrize(("gpus", "nics"), [(1, 6), (2, 6), (4, 6)])
def test_whole_numa_nodes_takes_every_nic_of_the_gpus_numa_nodes(
    tmp_path: Path, mixed: dict[str, Any], gpus: int, nics: int
) -> None:
    found = policies(tmp_path, "{resource: rdma/ib, wholeNumaNodes: {gpus: 4, nics: 6}}")
    explanation = explain(found, gpus, [mixed])
    assert explanation.plan.requests["rdma/ib"] == nics
    verdict = explanation.nodes[0]
    assert verdict.fits and verdict.pairs is not None and verdict.pairs.guaranteed, verdict


def test_an_option_sized_for_other_machines_still_says_why_not(
    tmp_path: Path, mixed: dict[str, Any]
) -> None:
    # Sized for a compute-only resource (4 per NUMA node): here 2 storage NICs share it.
    found = policies(tmp_path, "{resource: rdma/ib, wholeNumaNodes: {gpus: 4, nics: 4}}")
    reason = pairs_of(explain(found, 2, [mixed]))["dgx-mixed"]["reason"]
    assert "get 4 of its 6 rdma/ib NICs (2 storage/management)" in reason
    assert reason.endswith("pairs need spec.dra")  # the option is set already


def test_what_the_node_does_not_tell_is_never_promised(tmp_path: Path) -> None:
    found = policies(tmp_path, "{resource: rdma/ib}")
    nodes = [
        dgx_h100("unasked", None),
        dgx_h100("best-effort", MIXED, topology_manager="best-effort"),
        dgx_h100("other-resource", SPLIT),
    ]
    got = pairs_of(explain(found, 4, nodes))
    assert not any(p["guaranteed"] for p in got.values())
    assert "which NICs rdma/ib holds is not known" in got["unasked"]["reason"]
    assert (
        "topology-manager-policy best-effort: the kubelet need not put NICs on the GPUs'"
        in (got["best-effort"]["reason"])
    )
    assert "the kubelet lists no RDMA NIC of rdma/ib" in got["other-resource"]["reason"]


def test_dra_pairs_on_pcie_root_only(tmp_path: Path, mixed: dict[str, Any]) -> None:
    dra = "  dra: {gpu: {deviceClassName: gpu.nvidia.com}, nic: {deviceClassName: dranet}, " \
          "align: ALIGN, gpuCounts: [4]}\n"  # fmt: skip
    root = policies(tmp_path, "{resource: rdma/ib}", dra=dra.replace("ALIGN", "pcieRoot"))
    verdict = explain(root, 4, [mixed]).nodes[0].pairs
    assert verdict is not None and verdict.guaranteed and verdict.path == "DRA"
    numa = policies(tmp_path, "{resource: rdma/ib}", dra=dra.replace("ALIGN", "numaNode"))
    verdict = explain(numa, 4, [mixed]).nodes[0].pairs
    assert verdict is not None and not verdict.guaranteed and "align: numaNode" in verdict.text


def test_a_policy_that_asks_for_no_pairs_gets_no_verdict(
    tmp_path: Path, mixed: dict[str, Any]
) -> None:
    (tmp_path / "p.yaml").write_text(
        "apiVersion: topoplace.io/v1alpha1\nkind: PlacementPolicy\nmetadata: {name: pix}\n"
        "spec: {placement: {gpuNicLink: PXB}}\n"  # a link, but no NIC the kubelet hands out
    )
    found = explain(load_policy_dir(tmp_path), 2, [mixed])
    assert found.nodes[0].pairs is None and "PAIRS" not in to_table(found)


def test_the_table_names_each_reason_once(tmp_path: Path, mixed: dict[str, Any]) -> None:
    twin = dgx_h100("dgx-twin", MIXED)
    table = to_table(explain(policies(tmp_path, "{resource: rdma/ib}"), 2, [mixed, twin]))
    assert "NODE       FITS  SCORE  PAIRS" in table
    assert (
        "GPU↔NIC pairs not guaranteed where it fits:\n  dgx-mixed, dgx-twin: device-plugin path:"
        in table
    )


def fit_warnings(found: PolicySet, gpus: int, nodes: Sequence[dict[str, Any]]) -> list[str]:
    cache = NodeStore()
    cache.index = NodeIndex(NodeView.from_object(n) for n in nodes)
    cache.ready = True
    mutation = mutate(pod(gpus), "ml", found)
    return [w.line for w in PlacementWarnings(nodes=cache)(mutation.pod, found.get("pix"))]


def test_the_admission_warning_names_policy_gpus_and_reason(
    tmp_path: Path, mixed: dict[str, Any]
) -> None:
    found = policies(tmp_path, "{resource: rdma/ib}")
    (warning,) = fit_warnings(found, 2, [mixed, dgx_h100("dgx-twin", MIXED)])
    # Whole it is over the API server's 256 characters: the node names go first, then the
    # end of the remedy; the pointer to explain stays.
    assert warning == (
        "topoplace: placement policy pix for 2 GPUs: GPU↔NIC pairs not guaranteed on 2 of 2 "
        "nodes it fits: 2 of 4 GPUs on NUMA 0 get 2 of its 6 rdma/ib NICs (2 "
        "storage/management); pairs need spec.dra or…; run `kubectl topoplace explain`"
    )
    assert len(warning) <= LIMIT
    # Where some node pairs and another does not, the warning counts the ones that do not.
    compute = dgx_h100("dgx-compute", {"rdma/ib": COMPUTE})
    (warning,) = fit_warnings(found, 4, [compute, dgx_h100("dgx-unasked", None)])
    assert "not guaranteed on 1 of 2 nodes it fits: which NICs rdma/ib" in warning
    assert warning.endswith("resources.rdma.wholeNumaNodes; run `kubectl topoplace explain`")
    assert fit_warnings(found, 4, [compute]) == []  # all pair: nothing to say


def test_whole_numa_nodes_is_the_nic_limit_the_webhook_writes(tmp_path: Path) -> None:
    found = policies(tmp_path, "{resource: rdma/ib, wholeNumaNodes: {gpus: 4, nics: 6}}")
    mutated = mutate(pod(2), "ml", found).pod
    assert mutated["spec"]["containers"][0]["resources"]["limits"]["rdma/ib"] == "6"
    assert plan_for(mutated, found.get("pix")).requests["rdma/ib"] == 6
