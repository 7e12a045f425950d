"""Fixtures for the audit: the kernel-faithful machines of tests/agent/discovery, the NVIDIA
driver's /proc files for their GPUs, SR-IOV virtual functions added the kernel's way, and a
PodResources server speaking the real gRPC protocol on a unix socket."""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from agent.cli.main import main
from tests.agent.discovery.conftest import built_machine, fresh_machine, scratch
from tests.agent.discovery.machines import MELLANOX
from tests.agent.discovery.sysfs_builder import PciNode, SysfsBuilder

__all__ = ["add_vf", "built_machine", "fresh_machine", "gpu_uuid", "nvidia_proc", "scratch"]

IB_CLASS = 0x020700
CONNECTX7_VF = 0x101E


def gpu_uuid(bdf: str) -> str:
    """A fixed, UUID-shaped ID per GPU (the NVIDIA device plugin's default device ID)."""
    digits = bdf.replace(":", "").replace(".", "")
    return f"GPU-{digits[:8]:0>8}-1111-2222-3333-{digits:0>12}"[:40]


def nvidia_proc(proc_root: Path, sysfs_root: Path) -> dict[str, str]:
    """/proc/driver/nvidia/gpus/<bdf>/information for every NVIDIA GPU under sysfs_root, in the
    driver's format; returns bdf -> UUID."""
    uuids: dict[str, str] = {}
    devices = sysfs_root / "bus/pci/devices"
    for link in sorted(devices.iterdir()):
        vendor = (link / "vendor").read_text().strip()
        cls = int((link / "class").read_text(), 16)
        if vendor != "0x10de" or cls >> 8 not in (0x0300, 0x0302):
            continue
        uuid = uuids[link.name] = gpu_uuid(link.name)
        info = proc_root / "driver/nvidia/gpus" / link.name / "information"
        info.parent.mkdir(parents=True)
        info.write_text(
            "Model: \t\t NVIDIA H100 80GB HBM3\nIRQ:   \t\t 0\n"
            f"GPU UUID: \t {uuid}\nVideo BIOS: \t 96.00.5e.00.01\nBus Type: \t PCIe\n"
            f"DMA Size: \t 52 bits\nDMA Mask: \t 0xfffffffffffff\nBus Location: \t {link.name}\n"
            "Device Minor: \t 0\nGPU Excluded:\t No\n"
        )
    return uuids


def add_vf(sysfs_root: Path, pf_bdf: str, fn: int, index: int, rdma_name: str) -> str:
    """An SR-IOV VF of `pf_bdf` beside it (same bus, function `fn`), with its RDMA device."""
    b = SysfsBuilder(sysfs_root)
    pf_path = Path(os.path.realpath(sysfs_root / "bus/pci/devices" / pf_bdf))
    numa = int((pf_path / "numa_node").read_text())
    pf = PciNode(bdf=pf_bdf, path=pf_path, numa=numa)
    parent = PciNode(bdf=pf_path.parent.name, path=pf_path.parent, numa=numa)
    bus, dev = int(pf_bdf[5:7], 16), int(pf_bdf[8:10], 16)
    vf = b.virtual_function(
        pf, parent, bus, dev, fn, vendor=MELLANOX, device=CONNECTX7_VF, cls=IB_CLASS, index=index
    )
    b.rdma(vf, rdma_name)
    return vf.bdf


Audit = Callable[..., Any]


@pytest.fixture
def audit_json(capsys: pytest.CaptureFixture[str]) -> Audit:
    """audit_json(sysfs_root, socket, *flags) -> (exit status, document or None, stderr)."""

    def run(sysfs_root: Path, socket: Path, *flags: str) -> tuple[int, Any, str]:
        argv = ["audit", "--sysfs-root", str(sysfs_root), "--no-nvml",
                "--pod-resources-socket", str(socket), "--output", "json", *flags]  # fmt: skip
        rc = main(argv)
        out, err = capsys.readouterr()
        return rc, (json.loads(out) if out else None), err

    return run
