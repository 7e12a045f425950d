"""What audit says when facts are missing or wrong: a malformed answer, no socket, device IDs
this node cannot place, CPUs that are not this machine's; and the IDs it can place."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from tests.agent.audit.kubelet_stub import FakeKubelet, container, devices, pod

Machine = Callable[[str], Path]
UNKNOWN_GPU = "GPU-deadbeef-0000-0000-0000-000000000000"


def test_a_malformed_answer_is_one_clear_error(
    built_machine: Machine, kubelet: FakeKubelet, audit_json: Any
) -> None:
    kubelet.serve_raw(b"\x0a\xff\xff\xff\xff\x0f")  # a length prefix running past the end
    rc, doc, err = audit_json(built_machine("dgx-h100"), kubelet.socket)
    assert rc == 1 and doc is None
    assert "not a ListPodResourcesResponse" in err
    assert str(kubelet.socket) in err
    assert kubelet.calls == 1


def test_no_socket_says_where_it_looked(
    tmp_path: Path, built_machine: Machine, audit_json: Any
) -> None:
    missing = tmp_path / "kubelet.sock"
    rc, doc, err = audit_json(built_machine("dgx-h100"), missing)
    assert rc == 1 and doc is None
    assert f"no PodResources socket at {missing}" in err
    missing.write_text("")  # a plain file where the socket should be
    rc, _, err = audit_json(built_machine("dgx-h100"), missing)
    assert rc == 1 and "is not a unix socket" in err


def test_a_gpu_nobody_can_place_is_unknown(
    built_machine: Machine, kubelet: FakeKubelet, audit_json: Any
) -> None:
    kubelet.serve(pod("ml", "p", container(
        "w", devices("nvidia.com/gpu", [UNKNOWN_GPU]), cpus=range(4, 8)
    )))  # fmt: skip
    rc, doc, err = audit_json(built_machine("dgx-h100"), kubelet.socket)
    assert rc == 0, err
    (entry,) = doc["containers"]
    assert entry["verdict"] == "unknown"
    assert entry["reason"].startswith(f"NUMA node of {UNKNOWN_GPU} unknown")
    assert doc["counts"]["unknown"] == 1


def test_plugin_topology_places_an_unresolved_gpu_on_its_numa_node(
    built_machine: Machine, kubelet: FakeKubelet, audit_json: Any
) -> None:
    # No NVML, no /proc/driver/nvidia: only the device plugin's NUMA node is known.
    kubelet.serve(
        pod("ml", "alone", container(
            "w", devices("nvidia.com/gpu", [UNKNOWN_GPU], [0]), cpus=range(4, 8)
        )),
        pod("ml", "with-near-nic", container(
            "w", devices("nvidia.com/gpu", [UNKNOWN_GPU], [0]), devices("rdma/ib", ["mlx5_0"]),
            cpus=range(8, 12),
        )),
        pod("ml", "with-far-nic", container(
            "w", devices("nvidia.com/gpu", [UNKNOWN_GPU], [0]), devices("rdma/ib", ["mlx5_6"]),
            cpus=range(12, 16),
        )),
    )  # fmt: skip
    rc, doc, err = audit_json(built_machine("dgx-h100"), kubelet.socket)
    assert rc == 0, err
    alone, far, near = doc["containers"]  # sorted by pod name
    assert alone["verdict"] == "aligned" and alone["gpuNumaNodes"] == [0]
    assert near["verdict"] == "unknown"  # same NUMA node: PIX … NODE, nobody can tell
    assert near["reason"].startswith(f"link of {UNKNOWN_GPU} to the held NICs unknown")
    assert far["verdict"] == "nic-far"  # another NUMA node is SYS whatever the PCI path
    assert far["gpuNicLinks"] == [{"gpu": UNKNOWN_GPU, "nic": "mlx5_6", "link": "SYS"}]


def test_cpus_that_are_not_this_machines_are_unknown(
    built_machine: Machine, kubelet: FakeKubelet, audit_json: Any
) -> None:
    kubelet.serve(pod("ml", "p", container(
        "w", devices("nvidia.com/gpu", ["0000:1b:00.0"]), cpus=[4, 5, 4096]
    )))  # fmt: skip
    rc, doc, err = audit_json(built_machine("dgx-h100"), kubelet.socket)
    assert rc == 0, err
    (entry,) = doc["containers"]
    assert entry["verdict"] == "unknown"
    assert "CPUs 4096 are not online CPUs of this node" in entry["reason"]


def test_index_device_ids_and_pod_level_cpus(
    built_machine: Machine, kubelet: FakeKubelet, audit_json: Any
) -> None:
    # --device-id-strategy=index: "4" is GPU4 (socket 1). The trainer has no CPUs of its own
    # but the pod has a pod-level exclusive set; the sidecar's own CPUs are not the trainer's.
    kubelet.serve(pod(
        "ml", "p",
        container("trainer", devices("nvidia.com/gpu", ["4", "5"])),
        container("sidecar", cpus=[0, 1]),
        cpus=[0, 1, *range(60, 70)],
    ))  # fmt: skip
    rc, doc, err = audit_json(built_machine("dgx-h100"), kubelet.socket)
    assert rc == 0, err
    (entry,) = doc["containers"]
    assert [g["index"] for g in entry["gpus"]] == [4, 5]
    assert entry["cpus"] == "60-69" and entry["cpusFromPod"] is True
    assert entry["verdict"] == "aligned", entry["reason"]


def test_no_gpu_container_prints_an_empty_list(
    built_machine: Machine, kubelet: FakeKubelet, audit_json: Any
) -> None:
    kubelet.serve(pod("default", "web", container("nginx", cpus=[3])))
    rc, doc, err = audit_json(built_machine("dgx-h100"), kubelet.socket)
    assert rc == 0, err
    assert doc["containers"] == []
    assert set(doc["counts"].values()) == {0}


def test_dra_claimed_gpus_and_nics_are_placed(
    built_machine: Machine, kubelet: FakeKubelet, audit_json: Any
) -> None:
    # The NVIDIA DRA driver names devices gpu-<index>; a NIC driver's CDI name may carry the
    # RDMA device. GPU4 and mlx5_6 share a switch on socket 1.
    kubelet.serve(pod("ml", "dra", container(
        "w", cpus=range(60, 64),
        claims=[("gpus", "gpu.nvidia.com", "gpu-4", ["k8s.gpu.nvidia.com/device=gpu-4"]),
                ("nic", "dra.net", "nic-a", ["dra.net/rdma=mlx5_6"])],
    )))  # fmt: skip
    rc, doc, err = audit_json(built_machine("dgx-h100"), kubelet.socket)
    assert rc == 0, err
    (entry,) = doc["containers"]
    assert [g["pci"] for g in entry["gpus"]] == ["0000:9d:00.0"]
    assert entry["gpuNicLinks"] == [{"gpu": "GPU4", "nic": "mlx5_6", "link": "PIX"}]
    assert entry["verdict"] == "aligned", entry["reason"]


def test_the_socket_may_be_given_as_a_unix_endpoint(
    built_machine: Machine, kubelet: FakeKubelet, audit_json: Any
) -> None:
    kubelet.serve(pod("ml", "p", container("w", devices("nvidia.com/gpu", ["0000:1b:00.0"]))))
    rc, doc, err = audit_json(built_machine("dgx-h100"), f"unix://{kubelet.socket}")
    assert rc == 0, err
    assert [c["verdict"] for c in doc["containers"]] == ["shared-cpus"]
