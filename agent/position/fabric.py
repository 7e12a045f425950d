"""NVML's GPU fabric info: the node's NVLink domain, as `<ClusterUUID>.<CliqueID>`.

A GPU belongs to a domain once the fabric manager has registered it: state COMPLETED and
status SUCCESS. The node gets a domain only when every GPU reports one and all agree (a GPU
still registering, or a node split over two cliques, has no single domain to publish).
One `nvmlDeviceGetGpuFabricInfoV` call per GPU per discovery; GPUs without multi-node NVLink
answer NOT_SUPPORTED, which is normal and silent.
"""

from __future__ import annotations

import ctypes
import logging
import uuid
from dataclasses import dataclass
from types import ModuleType

from agent.sources.nvml import NvmlSession, shared_session

__all__ = ["FabricInfo", "nvlink_domain", "read_fabric"]

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class FabricInfo:
    domain: str | None  # `<ClusterUUID>.<CliqueID>`, None when the node has no single one
    reason: str | None  # why not, for `discover`'s output and one log line


def _domain_of(pynvml: ModuleType, info: object) -> tuple[str | None, str]:
    state = getattr(info, "state", None)
    status = getattr(info, "status", None)
    if state == pynvml.NVML_GPU_FABRIC_STATE_NOT_SUPPORTED:
        return None, "no multi-node NVLink"
    if state != pynvml.NVML_GPU_FABRIC_STATE_COMPLETED:
        return None, f"fabric registration not complete (state {state})"
    if status != pynvml.NVML_SUCCESS:
        return None, f"fabric registration failed (status {status})"
    raw = bytes(getattr(info, "clusterUuid", b""))
    if len(raw) != 16 or not any(raw):
        return None, "no cluster UUID"
    return f"{uuid.UUID(bytes=raw)}.{int(getattr(info, 'cliqueId', 0))}", ""


def nvlink_domain(pynvml: ModuleType) -> FabricInfo:
    """Ask each GPU for its fabric info and agree on one domain (NVMLError propagates)."""
    domains: set[str] = set()
    count = pynvml.nvmlDeviceGetCount()
    if count == 0:
        return FabricInfo(None, "no GPU")
    for index in range(count):
        handle = pynvml.nvmlDeviceGetHandleByIndex(index)
        info = pynvml.c_nvmlGpuFabricInfoV_t()
        try:
            pynvml.nvmlDeviceGetGpuFabricInfoV(handle, ctypes.pointer(info))
        except (pynvml.NVMLError_NotSupported, pynvml.NVMLError_FunctionNotFound):
            # Not an NVLink-fabric GPU, or a driver older than fabric info.
            return FabricInfo(None, "no multi-node NVLink")
        domain, why = _domain_of(pynvml, info)
        if domain is None:
            return FabricInfo(None, f"GPU {index}: {why}")
        domains.add(domain)
    if len(domains) > 1:
        return FabricInfo(None, f"GPUs in several NVLink domains: {', '.join(sorted(domains))}")
    return FabricInfo(domains.pop(), None)


def read_fabric(*, enabled: bool = True, session: NvmlSession | None = None) -> FabricInfo:
    """The node's NVLink domain from NVML; never raises (no NVML is a normal answer)."""
    if not enabled:
        return FabricInfo(None, "disabled (--no-nvml)")
    pynvml, reason = (session or shared_session()).get()
    if pynvml is None:
        return FabricInfo(None, reason)
    try:
        return nvlink_domain(pynvml)
    except pynvml.NVMLError as e:
        return FabricInfo(None, f"NVML fabric query failed: {e}")
