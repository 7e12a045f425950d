"""Device-ID facts: what the names device plugins report resolve to, as PCI addresses.

Device plugins name what they hand out in their own ways: the SR-IOV network plugin by PCI
address, the NVIDIA plugin by GPU UUID, RDMA plugins by RDMA device name. This source reads
the two maps a PCI address cannot give by itself:
- every RDMA device name in `class/infiniband` (virtual functions included) → its PCI function;
- every GPU UUID the NVIDIA driver shows in `/proc/driver/nvidia/gpus/<bdf>/information`
  (`GPU UUID:` line) → that bdf. NVML's UUIDs are added by the caller when NVML answers.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from agent.sources import SysfsError, read_link_name, read_text
from agent.sources.pci import is_bdf

__all__ = ["DeviceIds", "discover"]

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class DeviceIds:
    rdma: Mapping[str, str]  # RDMA device name -> PCI address (VFs included)
    gpu_uuids: Mapping[str, str]  # "GPU-…" -> PCI address


def _rdma(sysfs_root: Path) -> dict[str, str]:
    ib_dir = os.path.join(sysfs_root, "class/infiniband")
    try:
        names = sorted(os.listdir(ib_dir))
    except OSError:
        return {}
    found: dict[str, str] = {}
    for name in names:
        try:
            bdf = read_link_name(os.path.join(ib_dir, name, "device"))
        except SysfsError as e:
            log.debug("RDMA device %s: %s", name, e)
            continue
        if is_bdf(bdf):
            found[name] = bdf
    return found


def _gpu_uuids(proc_root: Path) -> dict[str, str]:
    gpus_dir = os.path.join(proc_root, "driver/nvidia/gpus")
    try:
        names = sorted(os.listdir(gpus_dir))
    except OSError:
        return {}  # no NVIDIA driver loaded, or not a Linux /proc
    found: dict[str, str] = {}
    for name in names:
        try:
            text = read_text(os.path.join(gpus_dir, name, "information"))
        except SysfsError as e:
            log.debug("NVIDIA GPU %s: %s", name, e)
            continue
        fields = {
            key.strip(): value.strip()
            for key, sep, value in (line.partition(":") for line in text.splitlines())
            if sep
        }
        uuid = fields.get("GPU UUID", "")
        bdf = fields.get("Bus Location", name).lower()
        if uuid.startswith("GPU-") and is_bdf(bdf):
            found[uuid] = bdf
    return found


def discover(sysfs_root: Path, proc_root: Path = Path("/proc")) -> DeviceIds:
    return DeviceIds(rdma=_rdma(sysfs_root), gpu_uuids=_gpu_uuids(proc_root))
