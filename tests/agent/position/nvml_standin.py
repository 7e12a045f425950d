"""A stand-in libnvidia-ml for the real pynvml module: its entry points as ctypes callbacks.

pynvml resolves each NVML function through `_nvmlGetFunctionPointer` and caches the result;
filling that cache with C-callable functions makes pynvml's own wrappers (argument structs,
version fields, return-code checks, NVMLError classes) run unchanged, and no device is needed.
"""

from __future__ import annotations

import ctypes
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from types import ModuleType

import pynvml

__all__ = ["DeviceGpu", "FabricGpu", "standin_devices", "standin_nvml"]


@dataclass(frozen=True)
class FabricGpu:
    cluster: uuid.UUID | None = None
    clique: int = 0
    state: int = pynvml.NVML_GPU_FABRIC_STATE_COMPLETED
    status: int = pynvml.NVML_SUCCESS
    answer: int = pynvml.NVML_SUCCESS  # what the call itself returns (NOT_SUPPORTED, …)


@contextmanager
def standin_nvml(gpus: list[FabricGpu], calls: list[str] | None = None) -> Iterator[ModuleType]:
    calls = calls if calls is not None else []
    handle_t = pynvml.c_nvmlDevice_t

    @ctypes.CFUNCTYPE(ctypes.c_int, ctypes.POINTER(ctypes.c_uint))
    def get_count(count):  # type: ignore[no-untyped-def]
        calls.append("count")
        count[0] = len(gpus)
        return pynvml.NVML_SUCCESS

    @ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_uint, ctypes.POINTER(handle_t))
    def get_handle(index, handle):  # type: ignore[no-untyped-def]
        calls.append(f"handle {index}")
        handle[0] = ctypes.cast(ctypes.c_void_p(index + 1), handle_t)
        return pynvml.NVML_SUCCESS

    info_t = pynvml.c_nvmlGpuFabricInfoV_t

    @ctypes.CFUNCTYPE(ctypes.c_int, handle_t, ctypes.POINTER(info_t))
    def get_fabric(handle, info):  # type: ignore[no-untyped-def]
        index = ctypes.cast(handle, ctypes.c_void_p).value - 1
        calls.append(f"fabric {index}")
        gpu = gpus[index]
        if info.contents.version != pynvml.nvmlGpuFabricInfo_v2:
            return pynvml.NVML_ERROR_ARGUMENT_VERSION_MISMATCH
        if gpu.answer != pynvml.NVML_SUCCESS:
            return gpu.answer
        raw = gpu.cluster.bytes if gpu.cluster else bytes(16)
        ctypes.memmove(info.contents.clusterUuid, raw, 16)
        info.contents.cliqueId = gpu.clique
        info.contents.state = gpu.state
        info.contents.status = gpu.status
        return pynvml.NVML_SUCCESS

    table = {
        "nvmlDeviceGetCount_v2": get_count,
        "nvmlDeviceGetHandleByIndex_v2": get_handle,
        "nvmlDeviceGetGpuFabricInfoV": get_fabric,
    }
    with _installed(table):
        yield pynvml


@contextmanager
def _installed(table: dict[str, object]) -> Iterator[None]:
    cache = pynvml._nvmlGetFunctionPointer_cache
    saved = {name: cache[name] for name in table if name in cache}
    cache.update(table)
    try:
        yield
    finally:
        for name in table:
            cache.pop(name, None)
        cache.update(saved)


NOT_SUPPORTED = pynvml.NVML_ERROR_NOT_SUPPORTED


@dataclass(frozen=True)
class DeviceGpu:
    """One GPU as NVML describes it; None for a placement answer means NOT_SUPPORTED."""

    bus_id: str  # NVML's form, 00000008:01:00.0
    name: str = "NVIDIA GB200"
    memory_bytes: int = 189471 * 2**20
    nvlinks: int = 18
    numa_node_id: int | None = None  # nvmlDeviceGetNumaNodeId
    cpus: frozenset[int] | None = None  # nvmlDeviceGetCpuAffinity
    memory_nodes: frozenset[int] | None = None  # nvmlDeviceGetMemoryAffinity (node scope)


def _fill(words: object, size: int, bits: frozenset[int]) -> int:
    """NVML's mask: `size` 64-bit words, bit b of word w = member 64w+b; too small → error."""
    if bits and max(bits) >= 64 * size:
        return pynvml.NVML_ERROR_INSUFFICIENT_SIZE
    array = ctypes.cast(words, ctypes.POINTER(ctypes.c_ulonglong))
    for i in range(size):
        array[i] = sum(1 << (b - 64 * i) for b in bits if 64 * i <= b < 64 * (i + 1))
    return pynvml.NVML_SUCCESS


@contextmanager
def standin_devices(
    gpus: list[DeviceGpu], calls: list[str] | None = None, driver: str = "570.172.08"
) -> Iterator[ModuleType]:
    """The NVML entry points that `agent.sources.nvml` reads per GPU, answering for `gpus`."""
    calls = calls if calls is not None else []
    handle_t, uint, void_p = pynvml.c_nvmlDevice_t, ctypes.c_uint, ctypes.c_void_p
    fn = ctypes.CFUNCTYPE

    def gpu(handle: object) -> DeviceGpu:
        return gpus[ctypes.cast(handle, void_p).value - 1]

    def text(value: str, buffer: object, size: int) -> int:
        ctypes.memmove(buffer, value.encode()[: size - 1] + b"\0", min(len(value) + 1, size))
        return pynvml.NVML_SUCCESS

    @fn(ctypes.c_int, ctypes.POINTER(uint))
    def count(out):  # type: ignore[no-untyped-def]
        out[0] = len(gpus)
        return pynvml.NVML_SUCCESS

    @fn(ctypes.c_int, uint, ctypes.POINTER(handle_t))
    def handle(index, out):  # type: ignore[no-untyped-def]
        out[0] = ctypes.cast(void_p(index + 1), handle_t)
        return pynvml.NVML_SUCCESS

    @fn(ctypes.c_int, void_p, uint)
    def driver_version(buffer, size):  # type: ignore[no-untyped-def]
        return text(driver, buffer, size)

    @fn(ctypes.c_int, handle_t, ctypes.POINTER(pynvml.nvmlPciInfo_t))
    def pci(h, info):  # type: ignore[no-untyped-def]
        info.contents.busId = gpu(h).bus_id.encode()
        return pynvml.NVML_SUCCESS

    @fn(ctypes.c_int, handle_t, void_p, uint)
    def name(h, buffer, size):  # type: ignore[no-untyped-def]
        return text(gpu(h).name, buffer, size)

    @fn(ctypes.c_int, handle_t, void_p, uint)
    def uuid_(h, buffer, size):  # type: ignore[no-untyped-def]
        return text(f"GPU-{uuid.uuid5(uuid.NAMESPACE_OID, gpu(h).bus_id)}", buffer, size)

    @fn(ctypes.c_int, handle_t, ctypes.POINTER(pynvml.c_nvmlMemory_t))
    def memory(h, out):  # type: ignore[no-untyped-def]
        out.contents.total = gpu(h).memory_bytes
        return pynvml.NVML_SUCCESS

    @fn(ctypes.c_int, handle_t, uint, ctypes.POINTER(uint))
    def nvlink(h, link, out):  # type: ignore[no-untyped-def]
        if link >= gpu(h).nvlinks:
            return pynvml.NVML_ERROR_INVALID_ARGUMENT
        out[0] = pynvml.NVML_FEATURE_ENABLED
        return pynvml.NVML_SUCCESS

    @fn(ctypes.c_int, handle_t, ctypes.POINTER(ctypes.c_int))
    def numa_id(h, out):  # type: ignore[no-untyped-def]
        calls.append("numa node id")
        if gpu(h).numa_node_id is None:
            return NOT_SUPPORTED
        out[0] = gpu(h).numa_node_id
        return pynvml.NVML_SUCCESS

    @fn(ctypes.c_int, handle_t, uint, void_p)
    def cpu_affinity(h, size, words):  # type: ignore[no-untyped-def]
        calls.append("cpu affinity")
        cpus = gpu(h).cpus
        return NOT_SUPPORTED if cpus is None else _fill(words, size, cpus)

    @fn(ctypes.c_int, handle_t, uint, void_p, uint)
    def memory_affinity(h, size, words, scope):  # type: ignore[no-untyped-def]
        calls.append(f"memory affinity scope {scope}")
        nodes = gpu(h).memory_nodes
        return NOT_SUPPORTED if nodes is None else _fill(words, size, nodes)

    table = {
        "nvmlDeviceGetCount_v2": count, "nvmlDeviceGetHandleByIndex_v2": handle,
        "nvmlSystemGetDriverVersion": driver_version, "nvmlDeviceGetPciInfo_v3": pci,
        "nvmlDeviceGetName": name, "nvmlDeviceGetUUID": uuid_,
        "nvmlDeviceGetMemoryInfo": memory, "nvmlDeviceGetNvLinkState": nvlink,
        "nvmlDeviceGetNumaNodeId": numa_id, "nvmlDeviceGetCpuAffinity": cpu_affinity,
        "nvmlDeviceGetMemoryAffinity": memory_affinity,
    }  # fmt: skip
    with _installed(table):
        yield pynvml
