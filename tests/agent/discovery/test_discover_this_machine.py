"""`discover` on this machine's own /sys: it must succeed and report what is there."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from common.vocabulary import Label

SYS = Path("/sys")
pytestmark = pytest.mark.skipif(
    not (SYS / "devices/system/cpu").is_dir(), reason="no sysfs on this machine"
)


def _nvidia_gpus_seen_directly() -> int:
    """Count NVIDIA display/3D functions by reading the files by hand."""
    count = 0
    devices = SYS / "bus/pci/devices"
    for dev in devices.iterdir() if devices.is_dir() else []:
        try:
            vendor = (dev / "vendor").read_text().strip()
            cls = (dev / "class").read_text().strip()
        except OSError:
            continue
        if vendor == "0x10de" and cls[:6] in ("0x0300", "0x0302") and not (dev / "physfn").exists():
            count += 1
    return count


def test_discover_real_sys(python: str, repo_root: Path, tmp_path: Path) -> None:
    proc = subprocess.run(
        [python, "-m", "agent", "discover", "--no-nvml", "--output", "json",
         "--dataset-root", str(tmp_path)],
        capture_output=True, text=True, cwd=repo_root, env={"PYTHONPATH": str(repo_root)},
        timeout=60,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    labels = doc["labels"]
    assert int(labels[Label.CPU_SOCKETS]) >= 1
    assert int(labels[Label.NUMA_NODES]) >= 1
    assert int(labels[Label.GPUS]) == _nvidia_gpus_seen_directly()
    ib = SYS / "class/infiniband"
    rdma = [d for d in ib.iterdir() if not (d / "device/physfn").exists()] if ib.is_dir() else []
    assert int(labels[Label.RDMA_NICS]) == len({os.readlink(d / "device") for d in rdma})
    assert len(doc["topology"]["sockets"]) == int(labels[Label.CPU_SOCKETS])
