"""Which NICs each RDMA resource holds, as the agent learns it from the kubelet's PodResources
(`GetAllocatableResources`, over the real gRPC protocol) and publishes it: the annotation's
`rdmaResources` and the label topoplace.io/rdma-resource-nics."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from agent.cli.main import main
from agent.discovery.discover import DiscoveryOptions, discover
from common.vocabulary import TOPOLOGY_ANNOTATION, Label
from tests.agent.audit.kubelet_stub import FakeKubelet, devices
from tests.webhook.nodefit.pair_nodes import COMPUTE, STORAGE, offer


def published(sysfs: Path, socket: Path | None) -> tuple[str | None, object]:
    found = discover(
        DiscoveryOptions(sysfs_root=sysfs, use_nvml=False, pod_resources_socket=socket)
    )
    topo = json.loads(found.annotations[TOPOLOGY_ANNOTATION])
    return found.labels.get(Label.RDMA_RESOURCE_NICS), topo.get("rdmaResources")


def test_a_resource_of_every_rdma_function_is_mixed(
    built_machine: Callable[[str], Path], kubelet: FakeKubelet
) -> None:
    kubelet.offer(*offer({"rdma/ib": STORAGE + COMPUTE}))
    label, resources = published(built_machine("dgx-h100"), kubelet.socket)
    assert label == "mixed"
    assert resources == [{"resource": "rdma/ib", "nics": sorted(COMPUTE + STORAGE)}]


def test_compute_and_storage_resources_apart_are_compute(
    built_machine: Callable[[str], Path], kubelet: FakeKubelet
) -> None:
    # Named as RDMA plugins name them (mlx5_N), and GPUs by index: not NICs, left out.
    names = [f"mlx5_{i}" for i in (0, 3, 4, 5, 6, 9, 10, 11)]
    kubelet.offer(
        devices("rdma/compute", names, [0]),
        devices("rdma/storage", ["mlx5_1", "mlx5_2", "mlx5_7", "mlx5_8"], [0]),
        devices("nvidia.com/gpu", [str(i) for i in range(8)], [0]),
    )
    label, resources = published(built_machine("dgx-h100"), kubelet.socket)
    assert label == "compute"
    assert resources == [
        {"resource": "rdma/compute", "nics": sorted(COMPUTE)},
        {"resource": "rdma/storage", "nics": sorted(STORAGE)},
    ]


def test_without_an_answer_nothing_is_claimed(
    built_machine: Callable[[str], Path], kubelet: FakeKubelet, tmp_path: Path
) -> None:
    sysfs = built_machine("dgx-h100")
    assert published(sysfs, None) == (None, None)  # not asked (`discover` without a socket)
    assert published(sysfs, tmp_path / "absent.sock") == (None, None)  # no kubelet there
    assert published(sysfs, kubelet.socket) == (None, [])  # asked: no RDMA resource offered


def test_discover_asks_the_kubelet_when_given_its_socket(
    built_machine: Callable[[str], Path], kubelet: FakeKubelet, capsys: pytest.CaptureFixture[str]
) -> None:
    kubelet.offer(*offer({"rdma/ib": COMPUTE}))
    argv = ["discover", "--sysfs-root", str(built_machine("dgx-h100")), "--no-nvml"]
    assert main([*argv, "--pod-resources-socket", str(kubelet.socket)]) == 0
    assert json.loads(capsys.readouterr().out)["labels"][Label.RDMA_RESOURCE_NICS] == "compute"
    assert main(argv) == 0
    assert Label.RDMA_RESOURCE_NICS not in json.loads(capsys.readouterr().out)["labels"]
