"""Discovery time: the largest fixture machines (kernel-faithful sysfs trees) and this machine.

Target: well under 100 ms for a 2-socket, 8-GPU, 12-NIC, ~200-PCI-device tree.
"""

from __future__ import annotations

import logging
import tempfile
from pathlib import Path
from typing import Any

from agent.discovery.discover import DiscoveryOptions, discover
from benchmarks.timing import time_calls
from tests.agent.discovery.machines import build

__all__ = ["run_discovery_bench"]

_FIXTURES = ("dgx-h100", "dgx-a100", "gb200-tray")
# /sys is an in-memory filesystem; build the fixture trees on tmpfs too where there is one.
_TMPFS = "/dev/shm" if Path("/dev/shm").is_dir() else None


def _row(name: str, options: DiscoveryOptions, *, calls: int) -> dict[str, Any]:
    result = discover(options)
    median, p99 = time_calls(lambda: discover(options), calls=calls, warmup=3)
    pci_devices = sum(1 for _ in (options.sysfs_root / "bus/pci/devices").iterdir())
    return {
        "machine": name,
        "PCI devices": pci_devices,
        "GPUs": len(result.topology.gpus),
        "RDMA NICs": len(result.topology.nics),
        "labels": len(result.labels),
        "median ms": median / 1000,
        "p99 ms": p99 / 1000,
        "target": "≪ 100 ms",
        "met": "yes" if p99 < 100_000 else "NO",
    }


def run_discovery_bench(*, calls: int = 50) -> list[dict[str, Any]]:
    # Skipped-device log lines are expected on real /sys; keep the report readable.
    logging.getLogger("agent").setLevel(logging.ERROR)
    rows = []
    with tempfile.TemporaryDirectory(dir=_TMPFS) as tmp:
        for name in _FIXTURES:
            root = build(name, Path(tmp) / name)
            options = DiscoveryOptions(
                sysfs_root=root, dataset_root=Path(tmp) / "datasets", use_nvml=False
            )
            rows.append(_row(f"fixture {name}", options, calls=calls))
        here = DiscoveryOptions(dataset_root=Path(tmp) / "datasets", use_nvml=False)
        rows.append(_row("this machine (/sys)", here, calls=calls))
    return rows


if __name__ == "__main__":
    from benchmarks.table import markdown_table

    print(markdown_table(run_discovery_bench()))
