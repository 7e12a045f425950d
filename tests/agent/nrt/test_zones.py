"""Free capacity per NUMA node from real PodResources answers (over the kubelet's gRPC
protocol) and a DGX H100 laid out as its kernel shows it."""

from __future__ import annotations

from pathlib import Path

import pytest

from agent.nrt.body import NodeRef, topology_body
from agent.nrt.snapshot import NodeSources, numa_facts, read_body
from agent.nrt.zones import NumaFacts, compute_zones
from agent.sources.cpu import numa_distances
from agent.sources.kubelet import KubeletFiles
from agent.sources.podresources import (
    Allocatable,
    PodResourcesError,
    allocatable_resources,
    list_pod_resources,
)
from tests.agent.audit.kubelet_stub import FakeKubelet, container, devices, memory, pod
from tests.agent.discovery.machines import DGX_H100_MEMORY, build

# The DGX H100 fixture: 2 sockets x 56 cores x 2 threads; NUMA 0 = CPUs 0-55,112-167.
NUMA0_CPUS = [*range(0, 56), *range(112, 168)]
NUMA1_CPUS = [*range(56, 112), *range(168, 224)]
RESERVED = {0, 112}  # the kubelet's reservedSystemCPUs: not allocatable
GPUS = {0: ["0", "1", "2", "3"], 1: ["4", "5", "6", "7"]}  # --device-id-strategy=index
NICS = {0: ["0000:18:00.0", "0000:29:00.0"], 1: ["0000:9a:00.0", "0000:aa:00.0"]}


def offer_dgx(kubelet: FakeKubelet, *, cpus: bool = True) -> None:
    kubelet.offer(
        *(devices("nvidia.com/gpu", ids, [n]) for n, ids in GPUS.items()),
        *(devices("rdma/ib", ids, [n]) for n, ids in NICS.items()),
        cpus=sorted(set(NUMA0_CPUS + NUMA1_CPUS) - RESERVED) if cpus else (),
    )


def one_gpu_pod(name: str, gpu: str, numa: int, cpus: list[int]) -> object:
    return pod("ml", name, container("trainer", devices("nvidia.com/gpu", [gpu], [numa]),
                                     cpus=cpus))  # fmt: skip


@pytest.fixture
def dgx(tmp_path: Path) -> NumaFacts:
    return numa_facts(build("dgx-h100", tmp_path / "sys"))


def counts(zones: tuple, resource: str, field: str = "available") -> list[int]:
    return [getattr(r, field) for z in zones for r in z.resources if r.name == resource]


def read(kubelet: FakeKubelet, facts: NumaFacts) -> tuple:
    return compute_zones(
        facts, allocatable_resources(kubelet.socket), list_pod_resources(kubelet.socket)
    )


def test_the_incident_two_plus_two_free_gpus(kubelet: FakeKubelet, dgx: NumaFacts) -> None:
    """pytorch/ci-infra#696: 1-GPU jobs on both sockets leave 2 + 2 free, never 4 on one."""
    offer_dgx(kubelet)
    kubelet.serve(
        one_gpu_pod("a", "0", 0, [1, 2]),
        one_gpu_pod("b", "1", 0, [3, 4]),
        one_gpu_pod("c", "4", 1, [56, 57]),
        one_gpu_pod("d", "5", 1, [58, 59]),
    )
    zones = read(kubelet, dgx)
    assert [z.numa_node for z in zones] == [0, 1]
    assert counts(zones, "nvidia.com/gpu", "capacity") == [4, 4]
    assert counts(zones, "nvidia.com/gpu") == [2, 2]
    assert counts(zones, "rdma/ib") == [2, 2]
    assert counts(zones, "cpu", "capacity") == [112, 112]
    assert counts(zones, "cpu", "allocatable") == [110, 112]  # 0 and 112 reserved
    assert counts(zones, "cpu") == [106, 108]


def test_an_idle_node_is_all_free_and_names_resources_as_the_plugin_does(
    kubelet: FakeKubelet, dgx: NumaFacts
) -> None:
    offer_dgx(kubelet)
    zones = read(kubelet, dgx)
    assert [[r.name for r in z.resources] for z in zones] == [
        ["cpu", "memory", "nvidia.com/gpu", "rdma/ib"]
    ] * 2
    assert counts(zones, "nvidia.com/gpu") == [4, 4]
    assert counts(zones, "memory", "capacity") == [DGX_H100_MEMORY * 1024 // 2] * 2


def test_cpu_manager_none_reports_no_cpus_then_capacity_is_allocatable(
    kubelet: FakeKubelet, dgx: NumaFacts
) -> None:
    offer_dgx(kubelet, cpus=False)
    kubelet.serve(one_gpu_pod("a", "6", 1, []))  # shared pool: no exclusive CPU
    zones = read(kubelet, dgx)
    assert counts(zones, "cpu", "allocatable") == [112, 112]
    assert counts(zones, "cpu") == [112, 112]
    assert counts(zones, "nvidia.com/gpu") == [4, 3]


def test_memory_manager_blocks_by_numa_node(kubelet: FakeKubelet, dgx: NumaFacts) -> None:
    gib = 1 << 30
    kubelet.offer(
        *(devices("nvidia.com/gpu", ids, [n]) for n, ids in GPUS.items()),
        mem=[memory("memory", 900 * gib, [0]), memory("memory", 900 * gib, [1]),
             memory("hugepages-1Gi", 16 * gib, [1])],
    )  # fmt: skip
    kubelet.serve(
        pod("ml", "pinned", container("t", mem=[memory("memory", 100 * gib, [1]),
                                                memory("hugepages-1Gi", 4 * gib, [1])])),
        # A group over both nodes: the kubelet does not say which part is where.
        pod("ml", "wide", container("t", mem=[memory("memory", 200 * gib, [0, 1])])),
    )  # fmt: skip
    zones = read(kubelet, dgx)
    assert counts(zones, "memory", "allocatable") == [900 * gib, 900 * gib]
    assert counts(zones, "memory") == [800 * gib, 700 * gib]
    assert counts(zones, "hugepages-1Gi") == [12 * gib]  # only node 1 has any
    assert [r.name for r in zones[1].resources][:3] == ["cpu", "memory", "hugepages-1Gi"]


def test_devices_counted_once_and_only_when_numa_bound(
    kubelet: FakeKubelet, dgx: NumaFacts
) -> None:
    kubelet.offer(
        devices("nvidia.com/gpu", GPUS[0], [0]),
        devices("example.com/fpga", ["f0"]),  # no topology: not bound to a zone
    )
    kubelet.serve(
        pod(
            "ml",
            "p",
            container("init", devices("nvidia.com/gpu", ["2"], [0])),
            container(
                "main", devices("nvidia.com/gpu", ["2"], [0]), devices("example.com/fpga", ["f0"])
            ),
            cpus=[5, 6],  # pod-level resources overlap the containers' CPUs
        ),
    )
    zones = read(kubelet, dgx)
    assert counts(zones, "nvidia.com/gpu") == [3]
    assert counts(zones, "example.com/fpga") == []
    assert counts(zones, "cpu") == [110, 112]


def test_costs_from_the_numa_distance_table(tmp_path: Path) -> None:
    root = build("dgx-h100", tmp_path / "sys")
    for node, row in ((0, "10 21"), (1, "21 10")):
        (root / f"devices/system/node/node{node}/distance").write_text(row + "\n")
    assert numa_distances(root) == {0: {0: 10, 1: 21}, 1: {0: 21, 1: 10}}
    zones = compute_zones(numa_facts(root), Allocatable(devices=(), cpu_ids=(), memory=()), ())
    assert zones[0].wire()["costs"] == [
        {"name": "node-0", "value": 10},
        {"name": "node-1", "value": 21},
    ]


def test_body_as_nfd_writes_it(kubelet: FakeKubelet, tmp_path: Path) -> None:
    offer_dgx(kubelet)
    kubelet.serve(one_gpu_pod("a", "0", 0, [1, 2]))
    config = tmp_path / "kubelet.yaml"
    config.write_text("topologyManagerPolicy: single-numa-node\ntopologyManagerScope: pod\n")
    sources = NodeSources(
        sysfs_root=build("dgx-h100", tmp_path / "sys"),
        pod_resources_socket=kubelet.socket,
        kubelet_config=config,
    )
    body = read_body(sources, NodeRef("dgx-a", "uid-1"))
    assert body["apiVersion"] == "topology.node.k8s.io/v1alpha2"
    assert body["kind"] == "NodeResourceTopology"
    assert body["metadata"] == {
        "name": "dgx-a",
        "ownerReferences": [{"apiVersion": "v1", "kind": "Node", "name": "dgx-a", "uid": "uid-1"}],
    }
    assert body["attributes"] == [
        {"name": "topologyManagerPolicy", "value": "single-numa-node"},
        {"name": "topologyManagerScope", "value": "pod"},
    ]
    assert body["topologyPolicies"] == ["SingleNUMANodePodLevel"]
    zone0 = body["zones"][0]
    assert (zone0["name"], zone0["type"]) == ("node-0", "Node")
    assert {"name": "nvidia.com/gpu", "capacity": "4", "allocatable": "4",
            "available": "3"} in zone0["resources"]  # fmt: skip
    # Equal inputs, equal bodies: nothing in it changes without the node changing.
    assert read_body(sources, NodeRef("dgx-a", "uid-1")) == body


def test_unknown_kubelet_config_publishes_no_attributes() -> None:
    body = topology_body(NodeRef("n", "u"), (), KubeletFiles())
    assert body["attributes"] == []
    assert body["topologyPolicies"] == ["None"]


def test_no_kubelet_is_a_podresources_error(tmp_path: Path) -> None:
    sources = NodeSources(sysfs_root=tmp_path, pod_resources_socket=tmp_path / "none.sock")
    with pytest.raises(PodResourcesError) as caught:
        read_body(sources, NodeRef("n", "u"))
    assert caught.value.kind == "absent"
