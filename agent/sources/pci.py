"""PCI source: every function under `bus/pci/devices/*` with its IDs and place in the tree.

The kernel links `bus/pci/devices/<bdf>` to `../../../devices/pci<dom>:<bus>/<root-port>/…/<bdf>`.
The link target is read once and normalised against the link's own directory — no realpath per
component — so the tree may live under any root (a host mount, a test's tmp dir). Below the
root port, components alternate switch upstream / downstream ports; a device's switch is the
nearest upstream port above it.
"""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from agent.sources import SysfsError, read_int

__all__ = [
    "BRIDGE_CLASS",
    "NVIDIA_VENDOR",
    "PciDevice",
    "PciInventory",
    "discover",
    "is_bdf",
]

log = logging.getLogger(__name__)

NVIDIA_VENDOR = 0x10DE
BRIDGE_CLASS = 0x0604  # PCI-to-PCI bridge: root ports and switch ports
_GPU_CLASSES = (0x0300, 0x0302)  # VGA controller, 3D controller

_BDF = re.compile(r"[0-9a-f]{4,}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]")
# A host bridge directory: pci0000:00, or pci10000:e0 for a VMD domain nested below a device.
_HOST_BRIDGE = re.compile(r"pci[0-9a-f]{4,}:[0-9a-f]{2}")


def is_bdf(name: str) -> bool:
    return _BDF.fullmatch(name) is not None


@dataclass(frozen=True, slots=True)
class PciDevice:
    bdf: str
    vendor: int
    device: int
    pci_class: int  # 24-bit class code, e.g. 0x030200
    numa_node: int  # -1: the kernel does not know
    root_complex: str  # the host bridge directory, e.g. "pci0000:00"
    ancestors: tuple[str, ...]  # bridges from the root port down to the parent
    switch: str | None  # the nearest switch upstream port above this device
    virtual_function: bool

    @property
    def is_bridge(self) -> bool:
        return self.pci_class >> 8 == BRIDGE_CLASS

    @property
    def is_nvidia_gpu(self) -> bool:
        return self.vendor == NVIDIA_VENDOR and self.pci_class >> 8 in _GPU_CLASSES


@dataclass(frozen=True, slots=True)
class PciInventory:
    devices: Mapping[str, PciDevice]  # by bdf, sorted

    def gpus(self) -> tuple[PciDevice, ...]:
        return tuple(d for d in self.devices.values() if d.is_nvidia_gpu)


def _hierarchy(bdf: str, target: str) -> tuple[str, tuple[str, ...]]:
    """(root complex, bridges above the device) from the normalised link target."""
    parts = target.split("/")
    if not parts or parts[-1] != bdf:
        raise SysfsError(f"link for {bdf} points at {target!r}, not at a device named {bdf}")
    # The last host bridge on the path owns the device (a VMD domain nests one below another).
    rc_index = max((i for i, p in enumerate(parts) if _HOST_BRIDGE.fullmatch(p)), default=-1)
    if rc_index < 0:
        raise SysfsError(f"link for {bdf} points at {target!r}, which has no pci host bridge")
    below = parts[rc_index + 1 : -1]
    bad = [p for p in below if not is_bdf(p)]
    if bad:
        raise SysfsError(f"link for {bdf} passes through {bad[0]!r}, not a PCI address")
    return parts[rc_index], tuple(below)


def _nearest_upstream_port(ancestors: tuple[str, ...]) -> str | None:
    # ancestors[0] is the root port; then upstream, downstream, upstream, … alternate, so
    # upstream ports sit at odd indices. The deepest one at or above the parent is the switch.
    last = len(ancestors) - 1
    index = last if last % 2 == 1 else last - 1
    return ancestors[index] if index >= 1 else None


def _read_device(devices_dir: str, bdf: str) -> PciDevice:
    link = os.path.join(devices_dir, bdf)
    try:
        target = os.readlink(link)
    except OSError as e:
        raise SysfsError(f"{link}: not a readable link ({e.strerror})") from None
    # Relative to the link's directory, exactly as the kernel means it.
    rc, ancestors = _hierarchy(bdf, os.path.normpath(os.path.join(devices_dir, target)))
    if not os.path.isdir(link):
        raise SysfsError(f"{link}: dangling link to {target!r}")
    numa = -1
    try:
        numa = read_int(os.path.join(link, "numa_node"))
    except SysfsError as e:
        if not e.missing:  # absent on kernels built without NUMA: simply unknown
            log.warning("PCI %s: NUMA node unknown: %s", bdf, e)
    return PciDevice(
        bdf=bdf,
        vendor=read_int(os.path.join(link, "vendor"), base=16),
        device=read_int(os.path.join(link, "device"), base=16),
        pci_class=read_int(os.path.join(link, "class"), base=16),
        numa_node=numa if numa >= 0 else -1,
        root_complex=rc,
        ancestors=ancestors,
        switch=_nearest_upstream_port(ancestors),
        virtual_function=os.path.lexists(os.path.join(link, "physfn")),
    )


def discover(root: Path) -> PciInventory:
    devices_dir = os.path.join(root, "bus/pci/devices")
    try:
        names = sorted(os.listdir(devices_dir))
    except OSError as e:
        log.info("no PCI devices to read under %s: %s", devices_dir, e.strerror)
        return PciInventory(devices={})
    devices: dict[str, PciDevice] = {}
    for name in names:
        if not is_bdf(name):
            log.warning("skipping %s/%s: not a PCI address", devices_dir, name)
            continue
        try:
            devices[name] = _read_device(devices_dir, name)
        except SysfsError as e:
            log.warning("skipping PCI device %s: %s", name, e, extra={"bdf": name})
    return PciInventory(devices=devices)
