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

__all__ = ["FabricGpu", "standin_nvml"]


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
    cache = pynvml._nvmlGetFunctionPointer_cache
    saved = {name: cache[name] for name in table if name in cache}
    cache.update(table)
    try:
        yield pynvml
    finally:
        for name in table:
            cache.pop(name, None)
        cache.update(saved)
