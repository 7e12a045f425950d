"""NIC source: RDMA devices from `class/infiniband/*` with their PCI function, netdevs and ports.

`class/infiniband` covers InfiniBand and RoCE alike (names are not always `mlx5_N`). Each
device's `device` link names its PCI function; netdevs come from `class/net/*/device`. Virtual
functions (a `physfn` link beside the function) are counted apart and left out.
"""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from agent.sources import SysfsError, read_link_name, read_text
from agent.sources.pci import is_bdf

__all__ = ["IbPort", "NicInventory", "RdmaDevice", "discover", "natural_key"]

log = logging.getLogger(__name__)

_DIGITS = re.compile(r"(\d+)")


def natural_key(name: str) -> tuple[tuple[int, int | str], ...]:
    """Sort key putting mlx5_2 before mlx5_10."""
    return tuple((1, int(p)) if p.isdigit() else (0, p) for p in _DIGITS.split(name) if p)


@dataclass(frozen=True, slots=True)
class IbPort:
    number: int
    state: str | None  # "ACTIVE", "DOWN", … (the kernel prints "4: ACTIVE")
    rate: str | None  # "400 Gb/sec (4X NDR)"
    link_layer: str | None  # "InfiniBand" or "Ethernet"


@dataclass(frozen=True, slots=True)
class RdmaDevice:
    name: str
    bdf: str
    netdevs: tuple[str, ...]
    ports: tuple[IbPort, ...]


@dataclass(frozen=True, slots=True)
class NicInventory:
    rdma: tuple[RdmaDevice, ...]  # physical functions only, in natural name order
    virtual_functions: tuple[str, ...]  # names of the RDMA devices left out as VFs
    netdevs: Mapping[str, tuple[str, ...]]  # PCI bdf -> interface names


def _listdir(path: str) -> list[str]:
    try:
        return sorted(os.listdir(path), key=natural_key)
    except OSError:
        return []


def _netdevs(root: str) -> dict[str, tuple[str, ...]]:
    by_bdf: dict[str, list[str]] = {}
    net_dir = os.path.join(root, "class/net")
    for iface in _listdir(net_dir):
        link = os.path.join(net_dir, iface, "device")
        if not os.path.lexists(link):
            continue  # lo, bridges, veths: no device behind them
        try:
            bdf = read_link_name(link)
        except SysfsError as e:
            log.warning("netdev %s: %s", iface, e)
            continue
        if is_bdf(bdf):
            by_bdf.setdefault(bdf, []).append(iface)
    return {bdf: tuple(names) for bdf, names in by_bdf.items()}


def _optional(path: str) -> str | None:
    try:
        return read_text(path)
    except SysfsError:
        return None


def _ports(dev_dir: str) -> tuple[IbPort, ...]:
    ports: list[IbPort] = []
    ports_dir = os.path.join(dev_dir, "ports")
    for name in _listdir(ports_dir):
        if not name.isdigit():
            continue
        port_dir = os.path.join(ports_dir, name)
        state = _optional(os.path.join(port_dir, "state"))
        ports.append(
            IbPort(
                number=int(name),
                state=(state.partition(":")[2].strip() or state) if state else None,
                rate=_optional(os.path.join(port_dir, "rate")),
                link_layer=_optional(os.path.join(port_dir, "link_layer")),
            )
        )
    return tuple(ports)


def discover(root: Path) -> NicInventory:
    netdevs = _netdevs(str(root))
    ib_dir = os.path.join(root, "class/infiniband")
    rdma: list[RdmaDevice] = []
    vfs: list[str] = []
    for name in _listdir(ib_dir):
        dev_dir = os.path.join(ib_dir, name)
        device = os.path.join(dev_dir, "device")
        try:
            bdf = read_link_name(device)
            if not is_bdf(bdf):
                raise SysfsError(f"{device}: points at {bdf!r}, not a PCI function")
            if not os.path.isdir(device):
                raise SysfsError(f"{device}: dangling link")
        except SysfsError as e:
            log.warning("skipping RDMA device %s: %s", name, e)
            continue
        if os.path.lexists(os.path.join(device, "physfn")):
            vfs.append(name)
            continue
        rdma.append(
            RdmaDevice(name=name, bdf=bdf, netdevs=netdevs.get(bdf, ()), ports=_ports(dev_dir))
        )
    if vfs:
        log.debug("left out %d RDMA virtual functions", len(vfs))
    return NicInventory(rdma=tuple(rdma), virtual_functions=tuple(vfs), netdevs=netdevs)
