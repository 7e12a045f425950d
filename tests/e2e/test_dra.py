"""DRA on the real control plane: ResourceSlices published for the simulated nodes the way the
GPU DRA driver and dranet would, DRA policies applied through the policies ConfigMap, and the
real kube-scheduler allocating the claims from Topoplace's templates."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import yaml

from e2e import procs
from e2e.cluster import Cluster
from e2e.kube import Kubectl
from tests.e2e import dra_slices
from tests.e2e.helpers import events, patch_policies, training_pod, wait_bound

MANAGED = "app.kubernetes.io/managed-by=topoplace"


def policy(name: str, *, align: str, counts: list[int], single_numa: bool) -> str:
    doc = {
        "apiVersion": "topoplace.io/v1alpha1",
        "kind": "PlacementPolicy",
        "metadata": {"name": name},
        "spec": {
            "namespaces": ["ml-*"],
            "placement": {"singleNumaNode": single_numa},
            "resources": {"cpuPerGpu": 4, "memoryPerGpu": "16Gi"},
            "dra": {
                "gpu": {"deviceClassName": dra_slices.GPU_CLASS},
                "nic": {
                    "deviceClassName": dra_slices.NIC_CLASS,
                    "selector": 'device.attributes["dra.net"].rdma == true',
                },
                "align": align,
                "gpuCounts": counts,
            },
        },
    }
    return yaml.safe_dump(doc)


POLICIES = {
    "e2e-dra-pairs.yaml": policy(
        "dra-pairs", align="pcieRoot", counts=[2, 4, 8], single_numa=False
    ),
    "e2e-dra-numa.yaml": policy("dra-numa", align="numaNode", counts=[4], single_numa=True),
}


@pytest.fixture(scope="module")
def slices(cluster: Cluster) -> Iterator[list[dict[str, Any]]]:
    """DeviceClasses and every node's ResourceSlices, published as the drivers would."""
    kubectl = cluster.kubectl
    published = [
        s
        for node, paths in cluster.nodes.items()
        for s in dra_slices.node_slices(node, paths["sysfs"])
    ]
    kubectl.apply([*dra_slices.device_classes(), *published])
    yield published
    for obj in published:
        kubectl.run("delete", "resourceslice", obj["metadata"]["name"], check=False)
    for obj in dra_slices.device_classes():
        kubectl.run("delete", "deviceclass", obj["metadata"]["name"], check=False)


@pytest.fixture(scope="module")
def dra_policies(cluster: Cluster) -> Iterator[dict[str, str]]:
    """The DRA policies added to the policies ConfigMap, removed again afterwards."""
    kubectl = cluster.kubectl
    patch_policies(kubectl, POLICIES)
    yield POLICIES
    patch_policies(kubectl, dict.fromkeys(POLICIES))


def templates(kubectl: Kubectl, namespace: str) -> set[str]:
    found = kubectl.json("get", "resourceclaimtemplates", "-n", namespace, "-l", MANAGED)
    return {t["metadata"]["name"] for t in found["items"]}


EXPECTED = {
    "topoplace-dra-pairs-2gpu",
    "topoplace-dra-pairs-4gpu",
    "topoplace-dra-pairs-8gpu",
    "topoplace-dra-numa-4gpu",
}


@pytest.fixture
def dra_namespace(
    kubectl: Kubectl, namespace: str, dra_policies: dict[str, str], slices: list[Any]
) -> str:
    """A namespace created after start-up, once its templates are there."""
    procs.wait_for(
        lambda: templates(kubectl, namespace) >= EXPECTED,
        f"Topoplace's ResourceClaimTemplates in {namespace}",
        timeout=30,
    )
    return namespace


def allocated_claim(kubectl: Kubectl, namespace: str, pod: str) -> dict[str, Any]:
    def claim() -> dict[str, Any] | None:
        status = kubectl.json("get", "pod", pod, "-n", namespace).get("status", {})
        names = [s.get("resourceClaimName") for s in status.get("resourceClaimStatuses", [])]
        if not names or not names[0]:
            return None
        found = kubectl.json("get", "resourceclaim", names[0], "-n", namespace)
        return found if dra_slices.allocated_devices(found) else None

    return procs.wait_for(claim, f"the allocated ResourceClaim of {namespace}/{pod}")


def test_each_gpu_is_allocated_beside_its_nic_on_the_dgx_h100(
    kubectl: Kubectl, dra_namespace: str, create: Callable[..., Any], slices: list[Any]
) -> None:
    stored = json.loads(
        create(training_pod("pairs", "dra-pairs", 8, machine="dgx-h100"), dra_namespace).stdout
    )
    refs = stored["spec"]["resourceClaims"]
    assert [r["resourceClaimTemplateName"] for r in refs] == ["topoplace-dra-pairs-8gpu"]
    limits = stored["spec"]["containers"][0]["resources"].get("limits", {})
    assert "nvidia.com/gpu" not in limits and "rdma/ib" not in limits
    assert wait_bound(kubectl, dra_namespace, "pairs").startswith("dgx-h100")
    pairs = dra_slices.allocated_pairs(allocated_claim(kubectl, dra_namespace, "pairs"), slices)
    assert len(pairs) == 8
    print(f"allocated GPU/NIC pcieRoot pairs: {pairs}")
    assert all(gpu == nic and gpu is not None for gpu, nic in pairs), pairs


def test_pairs_no_node_can_align_stay_pending_with_the_schedulers_reason(
    kubectl: Kubectl, dra_namespace: str, create: Callable[..., Any]
) -> None:
    # The PCIe server has two RDMA NICs, each on the root complex of one of its four GPUs.
    create(training_pod("unaligned", "dra-pairs", 4, machine="pcie-l40s"), dra_namespace)
    failed = procs.wait_for(
        lambda: events(kubectl, dra_namespace, "unaligned", "FailedScheduling"),
        "a FailedScheduling event for pod unaligned",
    )
    message = failed[-1]["message"]
    print(f"kube-scheduler: {message}")
    assert "claim" in message.lower() or "allocate" in message.lower(), message
    assert (
        kubectl.json("get", "pod", "unaligned", "-n", dra_namespace)["spec"].get("nodeName") is None
    )


def test_numa_alignment_with_single_numa_puts_four_gpus_on_one_numa_node(
    kubectl: Kubectl, dra_namespace: str, create: Callable[..., Any], slices: list[Any]
) -> None:
    create(training_pod("numa", "dra-numa", 4, machine="dgx-h100"), dra_namespace)
    wait_bound(kubectl, dra_namespace, "numa")
    claim = allocated_claim(kubectl, dra_namespace, "numa")
    pairs = dra_slices.allocated_pairs(claim, slices, attribute=dra_slices.NUMA_NODE)
    assert len(pairs) == 4
    assert len({v for pair in pairs for v in pair}) == 1, pairs  # GPUs and NICs: one node


def test_a_count_without_a_template_takes_the_device_plugin_path_with_a_warning(
    kubectl: Kubectl, dra_namespace: str
) -> None:
    pod = training_pod("one-gpu", "dra-pairs", 1, machine="dgx-h100")
    done = kubectl.run(
        "create", "-n", dra_namespace, "-f", "-", "-o", "json", input=json.dumps(pod)
    )
    assert "device-plugin path" in done.stderr, done.stderr
    stored = json.loads(done.stdout)
    assert not stored["spec"].get("resourceClaims")
    assert stored["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] == "1"


def test_templates_follow_policies_and_foreign_templates_survive(
    kubectl: Kubectl, dra_namespace: str
) -> None:
    foreign = {
        "apiVersion": dra_slices.API_VERSION,
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": "topoplace-dra-pairs-16gpu"},  # our naming, not our label
        "spec": {
            "spec": {
                "devices": {
                    "requests": [
                        {
                            "name": "gpu",
                            "exactly": {"deviceClassName": dra_slices.GPU_CLASS, "count": 1},
                        }
                    ]
                }
            }
        },
    }
    kubectl("create", "-n", dra_namespace, "-f", "-", input=json.dumps(foreign))
    patch_policies(kubectl, {"e2e-dra-numa.yaml": None})
    procs.wait_for(
        lambda: "topoplace-dra-numa-4gpu" not in templates(kubectl, dra_namespace),
        "template topoplace-dra-numa-4gpu deleted with its policy",
    )
    assert templates(kubectl, dra_namespace) == EXPECTED - {"topoplace-dra-numa-4gpu"}
    kubectl("get", "resourceclaimtemplate", "topoplace-dra-pairs-16gpu", "-n", dra_namespace)
    patch_policies(kubectl, {"e2e-dra-numa.yaml": POLICIES["e2e-dra-numa.yaml"]})
    procs.wait_for(
        lambda: templates(kubectl, dra_namespace) >= EXPECTED,
        "template topoplace-dra-numa-4gpu back with its policy",
    )
