"""The e2e DRA fixtures (tests/e2e/dra_slices.py): slices shaped as resource.k8s.io/v1 wants,
attributes taken from the machine fixtures, and the claims our templates make satisfiable."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.agent.discovery import machines
from tests.e2e.dra_slices import (
    GPU_CLASS,
    NIC_CLASS,
    NUMA_NODE,
    PCIE_ROOT,
    allocated_pairs,
    device_classes,
    node_slices,
)
from tests.kube import assert_valid


@pytest.fixture(scope="module")
def dgx(tmp_path_factory: pytest.TempPathFactory) -> list[dict[str, Any]]:
    root = machines.build("dgx-h100", tmp_path_factory.mktemp("dgx") / "sys")
    return node_slices("dgx-h100-a", root)


def devices(slices: list[dict[str, Any]], driver: str) -> list[dict[str, Any]]:
    (found,) = [s for s in slices if s["spec"]["driver"] == driver]
    return found["spec"]["devices"]


@pytest.mark.parametrize("machine", sorted(machines.MACHINES))
def test_every_machine_gives_valid_slices(machine: str, tmp_path: Path) -> None:
    slices = node_slices("n1", machines.build(machine, tmp_path / "sys"))
    for obj in slices:
        assert_valid(obj)
        assert obj["spec"]["nodeName"] == "n1"
        for device in obj["spec"]["devices"]:
            assert device["attributes"][PCIE_ROOT]["string"].startswith("pci")
    for obj in device_classes():
        assert_valid(obj)


def test_dgx_h100_publishes_one_device_per_gpu_and_per_rdma_nic(dgx: list[dict]) -> None:
    gpus, nics = devices(dgx, "gpu.nvidia.com"), devices(dgx, "dra.net")
    assert [g["name"] for g in gpus] == [f"gpu-{i}" for i in range(8)]
    assert len(nics) == 12 and all(n["attributes"]["rdma"] == {"bool": True} for n in nics)
    # each GPU has a NIC on its own root complex (DGX H100: one ConnectX-7 beside each GPU)
    roots = {n["attributes"][PCIE_ROOT]["string"] for n in nics}
    assert all(g["attributes"][PCIE_ROOT]["string"] in roots for g in gpus)
    assert {g["attributes"][NUMA_NODE]["int"] for g in gpus} == {0, 1}


def test_device_classes_select_by_driver() -> None:
    by_name = {c["metadata"]["name"]: c for c in device_classes()}
    assert set(by_name) == {GPU_CLASS, NIC_CLASS}
    expression = by_name[NIC_CLASS]["spec"]["selectors"][0]["cel"]["expression"]
    assert expression == 'device.driver == "dra.net"'


def test_allocated_pairs_reads_the_claims_allocation(dgx: list[dict]) -> None:
    claim = {
        "status": {
            "allocation": {
                "devices": {
                    "results": [
                        {"request": "gpu-0", "driver": "gpu.nvidia.com",
                         "pool": "dgx-h100-a", "device": "gpu-3"},
                        {"request": "nic-0", "driver": "dra.net",
                         "pool": "dgx-h100-a", "device": "mlx5-3"},
                    ]
                }
            }
        }
    }  # fmt: skip
    gpu3 = devices(dgx, "gpu.nvidia.com")[3]["attributes"][PCIE_ROOT]["string"]
    mlx3 = next(n for n in devices(dgx, "dra.net") if n["name"] == "mlx5-3")
    assert allocated_pairs(claim, dgx) == [(gpu3, mlx3["attributes"][PCIE_ROOT]["string"])]
    assert allocated_pairs(claim, dgx, NUMA_NODE) == [(0, 0)]
