"""GPU↔NIC pairs on the real kubelets: what explain and the admission warning promise, and
what `topoplace-agent audit` then finds in the kubelet's PodResources.

Each simulated DGX H100 runs a real kubelet v1.37.2 whose `rdma/ib` device plugin offers all
12 RDMA functions (8 GPU partners, 4 storage NICs), each with its NUMA node. The kubelet aligns
NUMA nodes, then takes any NICs there: 4 GPUs with 4 NICs may get storage NICs (pairs not
guaranteed), while `resources.rdma.wholeNumaNodes` takes all 6 NICs of the NUMA node and so
every GPU's partner."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from common.vocabulary import TOPOLOGY_ANNOTATION, Label
from e2e import procs
from e2e.cluster import Cluster
from e2e.kube import Kubectl
from tests.e2e.helpers import PLUGIN, node_labels, patch_policies, training_pod, wait_bound
from tests.e2e.kubelet_truth import audit, wait_admitted_or_refused

FILE = "e2e-pairs.yaml"
DGX = "dgx-h100"
_POLICY = """apiVersion: topoplace.io/v1alpha1
kind: PlacementPolicy
metadata: {{name: {name}}}
spec:
  placement: {{gpuNicLink: PIX, gpuNicPairs: true, topologyManagerPolicies: [restricted]}}
  resources: {{cpuPerGpu: 4, memoryPerGpu: 8Gi, rdma: {rdma}}}
"""
POLICIES = "---\n".join(
    [
        _POLICY.format(name="pairs-plain", rdma="{resource: rdma/ib}"),
        _POLICY.format(
            name="pairs-whole", rdma="{resource: rdma/ib, wholeNumaNodes: {gpus: 4, nics: 6}}"
        ),
    ]
)


@pytest.fixture(scope="module")
def pair_policies(kubectl: Kubectl, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """The two policies in the cluster's ConfigMap (and a directory for the offline explain),
    once the webhook serves them; removed afterwards."""
    directory = tmp_path_factory.mktemp("pair-policies")
    (directory / FILE).write_text(POLICIES)
    patch_policies(kubectl, {FILE: POLICIES})
    probe = training_pod("probe", "pairs-whole", 2)
    procs.wait_for(
        lambda: _limits(_dry_run(kubectl, probe)).get("rdma/ib") == "6",
        "the webhook to serve pairs-whole (ConfigMap → ..data swap → reload)",
        timeout=30,
        interval=0.5,
    )
    yield directory
    patch_policies(kubectl, {FILE: None})


def _dry_run(kubectl: Kubectl, pod: dict[str, Any]) -> dict[str, Any]:
    done = kubectl.run(
        "create", "-n", "default", "-f", "-", "--dry-run=server", "-o", "json",
        input=json.dumps(pod), check=False,
    )  # fmt: skip
    return json.loads(done.stdout) if done.returncode == 0 else {}


def _limits(pod: dict[str, Any]) -> dict[str, Any]:
    containers = pod.get("spec", {}).get("containers") or [{}]
    return containers[0].get("resources", {}).get("limits", {})


def explain(cluster: Cluster, policies: Path, pod: dict[str, Any], namespace: str) -> Any:
    """`kubectl topoplace explain --output json` against the live nodes, as a user runs it."""
    path = policies / f"{pod['metadata']['name']}.json"
    path.write_text(json.dumps(pod))
    done = subprocess.run(
        [PLUGIN, "explain", f"--policies={policies}", f"--namespace={namespace}",
         "--kubeconfig", str(cluster.kubeconfig), "--output=json", str(path)],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    return {n["node"]: n for n in json.loads(done.stdout)["nodes"]}


def partners(kubectl: Kubectl, node: str) -> dict[str, str]:
    """GPU PCI address → its partner NIC's, from the node's topology annotation."""
    meta = kubectl.json("get", "node", node)["metadata"]
    topo = json.loads(meta["annotations"][TOPOLOGY_ANNOTATION])
    return {topo["gpus"][g]["pci"]: topo["nics"][n]["pci"] for g, n in topo["gpuNicPairs"]}


def explain_run_audit(
    cluster: Cluster, kubectl: Kubectl, create: Callable[..., Any], namespace: str,
    policies: Path, pod: dict[str, Any],
) -> tuple[dict[str, Any], str, str, dict[str, Any]]:  # fmt: skip
    """Explain the pod, then create it: (explain's verdicts by node, the node it runs on, the
    admission warnings, the audit row of its trainer)."""
    said = explain(cluster, policies, pod, namespace)
    name = pod["metadata"]["name"]
    created = create(pod, namespace)
    node = wait_bound(kubectl, namespace, name)
    assert wait_admitted_or_refused(kubectl, namespace, name) == ("Running", "")
    return said, node, created.stderr, audit(cluster, node)[(namespace, name, "trainer")]


def show(capsys: pytest.CaptureFixture[str], pod: str, node: str, row: dict[str, Any]) -> None:
    """One line of what the kubelet gave and the audit said, printed with the results."""
    nics = ",".join(n["name"] for n in row["nics"])
    with capsys.disabled():
        print(f"\n{pod} on {node}: NICs {nics} -> {row['verdict']} ({row['nicLink']})")


def held_where_promised(kubectl: Kubectl, node: str, row: dict[str, Any]) -> set[str]:
    """What every path promises: the NICs on the GPUs' NUMA node. Returns the GPUs whose
    partner NIC the container does not hold."""
    assert {n["numa"] for n in row["nics"]} == set(row["gpuNumaNodes"]), row
    held = {n["pci"] for n in row["nics"]}
    pairs = partners(kubectl, node)
    return {g["pci"] for g in row["gpus"] if pairs[g["pci"]] not in held}


def test_the_agent_labels_what_the_kubelets_rdma_resource_holds(kubectl: Kubectl) -> None:
    for node in ("dgx-h100-a", "dgx-h100-b"):
        assert node_labels(kubectl, node).get(Label.RDMA_RESOURCE_NICS) == "mixed", node


@pytest.mark.parametrize("gpus", [4, 2])
def test_whole_numa_nodes_make_pairs_hold(
    cluster: Cluster, kubectl: Kubectl, namespace: str, create: Callable[..., Any],
    pair_policies: Path, gpus: int, capsys: pytest.CaptureFixture[str],
) -> None:  # fmt: skip
    pod = training_pod(f"whole-{gpus}", "pairs-whole", gpus, machine=DGX)
    said, node, warnings, row = explain_run_audit(
        cluster, kubectl, create, namespace, pair_policies, pod
    )
    assert said[node]["fits"] and said[node]["pairs"]["guaranteed"], said[node]
    assert "GPU↔NIC pairs" not in warnings
    assert len(row["nics"]) == 6  # every rdma/ib NIC of the GPUs' NUMA node
    show(capsys, pod["metadata"]["name"], node, row)
    assert held_where_promised(kubectl, node, row) == set()
    assert (row["verdict"], row["nicLink"]) == ("aligned", "PIX"), row


@pytest.mark.parametrize("gpus", [4, 2])
def test_part_of_the_nics_is_warned_and_the_audit_confirms_it(
    cluster: Cluster, kubectl: Kubectl, namespace: str, create: Callable[..., Any],
    pair_policies: Path, gpus: int, capsys: pytest.CaptureFixture[str],
) -> None:  # fmt: skip
    """4 GPUs fill a NUMA node, 2 take half of one: with one NIC per GPU from a resource that
    also holds storage NICs, neither is promised its partners."""
    pod = training_pod(f"plain-{gpus}", "pairs-plain", gpus, machine=DGX)
    said, node, warnings, row = explain_run_audit(
        cluster, kubectl, create, namespace, pair_policies, pod
    )
    facts = f"{gpus} of 4 GPUs on NUMA 0 get {gpus} of its 6 rdma/ib NICs (2 storage/management)"
    for name in ("dgx-h100-a", "dgx-h100-b"):  # explain, node by node
        assert said[name]["fits"] and not said[name]["pairs"]["guaranteed"], said[name]
        assert facts in said[name]["pairs"]["reason"]
    (warning,) = [w for w in warnings.splitlines() if "GPU↔NIC pairs" in w]
    head = f"placement policy pairs-plain for {gpus} GPUs: GPU↔NIC pairs not guaranteed on"
    assert head in warning and facts in warning, warning
    # The remedy is shortened first to keep the pointer to explain within 256 characters.
    assert "pairs need spec.dra or" in warning
    assert warning.endswith("run `kubectl topoplace explain`"), warning
    # What was promised holds: the NICs on the GPUs' NUMA node. The partners were not, and
    # the audit's verdict is what the kubelet's pick gave.
    show(capsys, pod["metadata"]["name"], node, row)
    unpaired = held_where_promised(kubectl, node, row)
    assert len(row["nics"]) == gpus
    assert row["verdict"] == ("nic-far" if unpaired else "aligned"), row
