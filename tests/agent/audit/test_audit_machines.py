"""`topoplace-agent audit` on real machine classes: each verdict and reason is what the
hardware and the kubelet's assignment imply. The assignment comes over the real PodResources
gRPC protocol; the hardware is the kernel-faithful DGX H100 / DGX A100 NPS4 sysfs trees."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.agent.audit.conftest import add_vf, nvidia_proc
from tests.agent.audit.kubelet_stub import FakeKubelet, container, devices, memory, pod

Machine = Callable[[str], Path]
GiB = 1 << 30

H100_GPUS = ["0000:1b:00.0", "0000:43:00.0", "0000:52:00.0", "0000:61:00.0",
             "0000:9d:00.0", "0000:c3:00.0", "0000:d1:00.0", "0000:df:00.0"]  # fmt: skip
H100_PIX_NICS = ["mlx5_0", "mlx5_3", "mlx5_4", "mlx5_5", "mlx5_6", "mlx5_9", "mlx5_10", "mlx5_11"]
H100_NODE0 = [*range(0, 56), *range(112, 168)]
H100_NODE1 = [*range(56, 112), *range(168, 224)]


def a100_node_cpus(node: int) -> list[int]:
    """NPS4: 16 cores per NUMA node, thread siblings 128 apart."""
    first = (node // 4) * 64 + (node % 4) * 16
    return [*range(first, first + 16), *range(first + 128, first + 144)]


@pytest.fixture
def h100(tmp_path: Path, built_machine: Machine) -> tuple[Path, Path, dict[str, str]]:
    root = built_machine("dgx-h100")
    proc = tmp_path / "proc"
    return root, proc, nvidia_proc(proc, root)


def only(doc: dict[str, Any]) -> dict[str, Any]:
    (entry,) = doc["containers"]
    return entry


def best_links(entry: dict[str, Any]) -> dict[str, str]:
    rank = ["PIX", "PXB", "PHB", "NODE", "SYS"].index
    best: dict[str, str] = {}
    for link in entry["gpuNicLinks"]:
        if link["gpu"] not in best or rank(link["link"]) < rank(best[link["gpu"]]):
            best[link["gpu"]] = link["link"]
    return best


def test_full_node_8_gpu_pod_on_dgx_h100_is_aligned(
    h100: tuple[Path, Path, dict[str, str]], kubelet: FakeKubelet, audit_json: Any
) -> None:
    root, proc, uuids = h100
    gpus = [devices("nvidia.com/gpu", [uuids[b]], [0 if i < 4 else 1])
            for i, b in enumerate(H100_GPUS)]  # fmt: skip
    nics = devices("rdma/ib", H100_PIX_NICS)  # the RDMA plugin names the devices
    cpus = [c for c in H100_NODE0 + H100_NODE1 if c not in (0, 1, 112, 113)]  # reserved
    kubelet.serve(
        pod("ml", "train-0", container(
            "trainer", *gpus, nics, cpus=cpus,
            mem=[memory("memory", 900 * GiB, [0, 1]), memory("hugepages-1Gi", 64 * GiB, [0, 1])],
        )),
        pod("kube-system", "dns", container("coredns", cpus=[2])),  # no GPU: not audited
    )  # fmt: skip
    rc, doc, err = audit_json(root, kubelet.socket, "--proc-root", str(proc))
    assert rc == 0, err
    entry = only(doc)
    assert (entry["namespace"], entry["pod"], entry["container"]) == ("ml", "train-0", "trainer")
    assert entry["verdict"] == "aligned", entry["reason"]
    assert entry["gpuNumaNodes"] == entry["cpuNumaNodes"] == entry["memoryNumaNodes"] == [0, 1]
    assert [g["pci"] for g in entry["gpus"]] == H100_GPUS
    assert set(best_links(entry).values()) == {"PIX"}
    assert "PIX or better" in entry["reason"]
    assert doc["counts"]["aligned"] == 1


def test_devices_are_listed_in_machine_order_whatever_order_the_kubelet_keeps(
    h100: tuple[Path, Path, dict[str, str]], kubelet: FakeKubelet, audit_json: Any
) -> None:
    # The kubelet keeps a container's device IDs in a set, so its order changes from one
    # answer to the next (a restart shows it); the audit's must not.
    root, proc, uuids = h100
    order = [H100_GPUS[i] for i in (5, 1, 4, 0)]
    nics = ["mlx5_9", "mlx5_0", "mlx5_6", "mlx5_10"]
    kubelet.serve(pod("ml", "shuffled", container(
        "trainer", devices("nvidia.com/gpu", [uuids[b] for b in order]), devices("rdma/ib", nics),
        cpus=range(2, 18),
    )))  # fmt: skip
    rc, doc, err = audit_json(root, kubelet.socket, "--proc-root", str(proc))
    assert rc == 0, err
    entry = only(doc)
    assert [g["index"] for g in entry["gpus"]] == [0, 1, 4, 5]
    assert [g["pci"] for g in entry["gpus"]] == sorted(order)
    assert [n["id"] for n in entry["nics"]] == ["mlx5_0", "mlx5_6", "mlx5_9", "mlx5_10"]


def test_4_gpu_pod_with_cpus_on_the_other_socket_is_cpus_remote(
    h100: tuple[Path, Path, dict[str, str]], kubelet: FakeKubelet, audit_json: Any, tmp_path: Path
) -> None:
    root, proc, uuids = h100
    config = tmp_path / "config.json"  # EKS writes JSON
    config.write_text('{"kind": "KubeletConfiguration", "cpuManagerPolicy": "static",'
                      ' "topologyManagerPolicy": "best-effort"}')  # fmt: skip
    cpus = [*range(56, 72), *range(168, 184)]  # 16 cores of socket 1
    kubelet.serve(pod("ml", "half", container(
        "trainer", devices("nvidia.com/gpu", [uuids[b] for b in H100_GPUS[:4]]), cpus=cpus
    )))  # fmt: skip
    rc, doc, err = audit_json(
        root, kubelet.socket, "--proc-root", str(proc), "--kubelet-config", str(config)
    )
    assert rc == 0, err
    entry = only(doc)
    assert entry["verdict"] == "cpus-remote"
    assert entry["gpuNumaNodes"] == [0] and entry["cpuNumaNodes"] == [1]
    assert "56-71,168-183 on NUMA node 1 (another socket), GPUs on NUMA node 0" in entry["reason"]
    assert "topology manager policy is best-effort" in entry["reason"]


@pytest.mark.parametrize(
    ("policy", "says"),
    [("static", "not Guaranteed"), ("none", "CPU manager policy is none")],
)
def test_burstable_gpu_pod_has_shared_cpus_and_says_why(
    policy: str,
    says: str,
    h100: tuple[Path, Path, dict[str, str]],
    kubelet: FakeKubelet,
    audit_json: Any,
    tmp_path: Path,
) -> None:
    root, proc, uuids = h100
    config = tmp_path / "config.yaml"
    config.write_text(f"kind: KubeletConfiguration\ncpuManagerPolicy: {policy}\n")
    kubelet.serve(pod("ml", "notebook", container(
        "jupyter", devices("nvidia.com/gpu", [uuids[H100_GPUS[4]], uuids[H100_GPUS[5]]], [1])
    )))  # fmt: skip
    rc, doc, err = audit_json(
        root, kubelet.socket, "--proc-root", str(proc), "--kubelet-config", str(config)
    )
    assert rc == 0, err
    entry = only(doc)
    assert entry["verdict"] == "shared-cpus"
    assert says in entry["reason"]
    assert entry["cpus"] == "" and entry["gpuNumaNodes"] == [1]


def test_rdma_vf_far_from_its_gpu_is_nic_far_and_a_near_one_is_not(
    tmp_path: Path, fresh_machine: Machine, kubelet: FakeKubelet, audit_json: Any
) -> None:
    root = fresh_machine("dgx-h100")
    far_vf = add_vf(root, "0000:9a:00.0", fn=2, index=0, rdma_name="mlx5_12")  # socket 1
    near_vf = add_vf(root, "0000:18:00.0", fn=2, index=0, rdma_name="mlx5_13")  # GPU0's switch
    sriov = "nvidia.com/mlnx_sriov_rdma"  # the SR-IOV network plugin hands out PCI addresses
    kubelet.serve(
        pod("ml", "far", container(
            "w", devices("nvidia.com/gpu", ["0000:1b:00.0"], [0]), devices(sriov, [far_vf], [1]),
            cpus=range(2, 18),
        )),
        pod("ml", "near", container(
            "w", devices("nvidia.com/gpu", ["0000:1b:00.0"], [0]), devices(sriov, [near_vf], [0]),
            cpus=range(18, 34),
        )),
    )  # fmt: skip
    rc, doc, err = audit_json(root, kubelet.socket)
    assert rc == 0, err
    far, near = doc["containers"]
    assert far["verdict"] == "nic-far"
    assert "GPU0 reaches its nearest held NIC mlx5_12 at SYS" in far["reason"]
    assert far["nics"][0]["virtualFunction"] is True and far["nics"][0]["pci"] == far_vf
    assert near["verdict"] == "aligned", near["reason"]
    assert best_links(near) == {"GPU0": "PIX"}


def test_memory_pinned_on_the_other_node_is_memory_remote(
    h100: tuple[Path, Path, dict[str, str]], kubelet: FakeKubelet, audit_json: Any
) -> None:
    root, proc, uuids = h100
    kubelet.serve(pod("ml", "p", container(
        "w", devices("nvidia.com/gpu", [uuids[H100_GPUS[0]]], [0]), devices("rdma/ib", ["mlx5_0"]),
        cpus=range(4, 20), mem=[memory("memory", 64 * GiB, [1])],
    )))  # fmt: skip
    rc, doc, err = audit_json(root, kubelet.socket, "--proc-root", str(proc))
    assert rc == 0, err
    entry = only(doc)
    assert entry["verdict"] == "memory-remote"
    assert entry["reason"] == "memory pinned on NUMA node 1, GPUs on NUMA node 0"


def test_dgx_a100_nps4_full_node_pod_on_the_gpu_nodes_is_aligned(
    built_machine: Machine, kubelet: FakeKubelet, audit_json: Any
) -> None:
    root = built_machine("dgx-a100")
    gpu_nodes = [3, 3, 1, 1, 7, 7, 5, 5]
    gpus = ["0000:07:00.0", "0000:0f:00.0", "0000:47:00.0", "0000:4f:00.0",
            "0000:87:00.0", "0000:8f:00.0", "0000:a7:00.0", "0000:af:00.0"]  # fmt: skip
    ib = ["mlx5_0", "mlx5_1", "mlx5_2", "mlx5_3", "mlx5_6", "mlx5_7", "mlx5_8", "mlx5_9"]
    cpus = [c for n in (1, 3, 5, 7) for c in a100_node_cpus(n)]
    assert len(gpus) == len(gpu_nodes)
    kubelet.serve(pod("ml", "big", container(
        "trainer", *(devices("nvidia.com/gpu", [g], [n]) for g, n in zip(gpus, gpu_nodes)),  # noqa: B905
        devices("rdma/ib", ib), cpus=cpus,
    )))  # fmt: skip
    rc, doc, err = audit_json(root, kubelet.socket)
    assert rc == 0, err
    entry = only(doc)
    assert entry["verdict"] == "aligned", entry["reason"]
    assert entry["gpuNumaNodes"] == entry["cpuNumaNodes"] == [1, 3, 5, 7]
    assert set(best_links(entry).values()) == {"PXB"}  # two switch levels: never PIX here


def test_dgx_a100_nps4_cpus_on_a_neighbour_node_of_the_same_socket_are_remote(
    built_machine: Machine, kubelet: FakeKubelet, audit_json: Any
) -> None:
    root = built_machine("dgx-a100")
    kubelet.serve(pod("ml", "pair", container(
        "trainer", devices("nvidia.com/gpu", ["0000:07:00.0", "0000:0f:00.0"], [3]),
        devices("rdma/ib", ["mlx5_0"]), cpus=a100_node_cpus(2)[:8],
    )))  # fmt: skip
    rc, doc, err = audit_json(root, kubelet.socket)
    assert rc == 0, err
    entry = only(doc)
    assert entry["verdict"] == "cpus-remote"
    assert entry["reason"] == (
        "exclusive CPUs 32-39 on NUMA node 2 (same socket as the GPUs), GPUs on NUMA node 3"
    )
    assert best_links(entry) == {"GPU0": "PXB", "GPU1": "PXB"}


def test_table_is_one_row_per_gpu_container(
    h100: tuple[Path, Path, dict[str, str]],
    kubelet: FakeKubelet,
    capsys: pytest.CaptureFixture[str],
) -> None:
    from agent.cli.main import main

    root, proc, uuids = h100
    kubelet.serve(
        pod("ml", "a", container("w", devices("nvidia.com/gpu", [uuids[H100_GPUS[0]]]),
                                 devices("rdma/ib", ["mlx5_0"]), cpus=range(4, 8))),
        pod("ml", "b", container("w", devices("nvidia.com/gpu", [uuids[H100_GPUS[7]]]))),
    )  # fmt: skip
    argv = ["audit", "--sysfs-root", str(root), "--no-nvml", "--proc-root", str(proc),
            "--pod-resources-socket", str(kubelet.socket)]  # fmt: skip
    assert main(argv) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split() == ["POD", "CONTAINER", "GPUs", "GPU", "NUMA", "CPUs", "CPU", "NUMA",
                                "MEM", "NUMA", "NICs", "NIC", "LINK", "VERDICT"]  # fmt: skip
    assert lines[1].split() == ["ml/a", "w", "GPU0", "0", "4-7", "0", "-", "mlx5_0", "PIX",
                                "aligned"]  # fmt: skip
    assert lines[2].split() == ["ml/b", "w", "GPU7", "1", "shared", "-", "-", "-", "-",
                                "shared-cpus"]  # fmt: skip
    assert any(line.startswith("  ml/b/w: shared-cpus: no exclusive CPUs") for line in lines)


def test_gpus_known_only_by_numa_node_are_judged_where_identity_cannot_matter(
    built_machine: Machine, kubelet: FakeKubelet, audit_json: Any
) -> None:
    # UUIDs with neither NVML nor /proc/driver/nvidia: only the device plugin's NUMA nodes.
    uuids = [f"GPU-00000000-0000-0000-0000-00000000000{i}" for i in range(8)]
    full = [devices("nvidia.com/gpu", [u], [0 if i < 4 else 1]) for i, u in enumerate(uuids)]
    # All 8 GPUs with their 8 PIX NICs: whichever UUID is which, each has its NIC.
    kubelet.serve(pod("ml", "full", container(
        "w", *full, devices("rdma/ib", H100_PIX_NICS), cpus=[*range(4, 20), *range(60, 76)]
    )))  # fmt: skip
    rc, doc, err = audit_json(built_machine("dgx-h100"), kubelet.socket)
    assert rc == 0, err
    (full_entry,) = doc["containers"]
    assert full_entry["verdict"] == "aligned", full_entry["reason"]
    assert full_entry["nicLink"] == "PIX"
    # 4 GPUs of socket 0 with only the storage NICs (own root ports): NODE for every one.
    kubelet.serve(pod("ml", "storage-nics", container(
        "w", devices("nvidia.com/gpu", uuids[:4], [0]), devices("rdma/ib", ["mlx5_1", "mlx5_2"]),
        cpus=range(20, 36),
    )))  # fmt: skip
    rc, doc, err = audit_json(built_machine("dgx-h100"), kubelet.socket)
    assert rc == 0, err
    (storage,) = doc["containers"]
    assert storage["verdict"] == "nic-far"
    assert (
        "reach a held NIC at best at NODE, whichever of the node's 4 free GPUs"
        in (storage["reason"])
    )
