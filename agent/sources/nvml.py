"""NVML source (optional): product name, memory, UUID and NVLink count per GPU, by PCI address;
and where NVML places the GPU: the CPUs close to it (`nvmlDeviceGetCpuAffinity`), the NUMA
nodes whose memory is close (`nvmlDeviceGetMemoryAffinity`, node scope) and the NUMA node of
its own memory (`nvmlDeviceGetNumaNodeId`: on a Grace machine in NUMA mode the GPU's HBM node,
a node without CPUs — never where the GPU attaches; vllm-project/vllm#39361).

Everything here is enrichment: sysfs alone finds the GPUs. A missing library, no driver, no
GPU or an NVML error yields an empty result with the reason, logged once per reason — never
an exception (a driver that loads late must not crash-loop the agent; a failed start is retried
at most once a minute). NVML is initialised once per process and reused, since discovery runs
on every resync.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from types import ModuleType

__all__ = [
    "NvmlGpu",
    "NvmlInfo",
    "NvmlSession",
    "discover",
    "normalize_bus_id",
    "shared_session",
]

log = logging.getLogger(__name__)

# Links probed per GPU; NVML answers an error past the GPU's real count (18 on H100).
_MAX_NVLINKS = 18
# 64-bit words asked for in the affinity masks: CPUs 0-4095 and NUMA nodes 0-1023, more than
# any machine has (the kubelet's own NUMA masks stop at 64).
_CPU_SET_WORDS, _NODE_SET_WORDS = 64, 16


@dataclass(frozen=True, slots=True)
class NvmlGpu:
    bdf: str
    name: str
    uuid: str
    memory_bytes: int
    nvlinks: int  # active NVLink links
    # None where NVML does not say (NOT_SUPPORTED on most x86 GPUs for the NUMA node id).
    numa_node_id: int | None = None  # the NUMA node of the GPU's own memory
    cpu_affinity: frozenset[int] | None = None  # CPUs close to the GPU
    memory_affinity: frozenset[int] | None = None  # NUMA nodes whose memory is close


@dataclass(frozen=True, slots=True)
class NvmlInfo:
    gpus: Mapping[str, NvmlGpu]  # by normalised bdf
    driver_version: str | None
    reason: str | None  # why nothing was read; None when NVML answered


def normalize_bus_id(bus_id: str | bytes) -> str:
    """NVML's `00000000:1B:00.0` → sysfs's `0000:1b:00.0`."""
    text = bus_id.decode() if isinstance(bus_id, bytes) else bus_id
    domain, _, rest = text.strip().lower().partition(":")
    return f"{int(domain, 16):04x}:{rest}"


def _text(value: str | bytes) -> str:
    return value.decode() if isinstance(value, bytes) else value


def _initialise() -> tuple[ModuleType | None, str]:
    try:
        import pynvml
    except ImportError as e:
        return None, f"pynvml is not installed ({e})"
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError as e:  # no driver, driver/library mismatch, no permission
        return None, f"NVML did not initialise: {e}"
    return pynvml, ""


class NvmlSession:
    """NVML initialised once per process, or the reason it is not, logged once per reason.

    A failed start is retried at most every RETRY_SECONDS, so a driver that loads after the
    agent started is picked up without a restart; a success is kept for the process's life.
    """

    RETRY_SECONDS = 60.0

    def __init__(
        self,
        *,
        clock: Callable[[], float] = time.monotonic,
        initialise: Callable[[], tuple[ModuleType | None, str]] = _initialise,
    ) -> None:
        self._clock = clock
        self._initialise = initialise  # tests: a stand-in NVML
        self._module: ModuleType | None = None
        self._reason: str | None = None
        self._failed_at: float | None = None
        self._reported: set[str] = set()

    def report(self, reason: str) -> None:
        if reason not in self._reported:  # once per distinct reason, not on every resync
            self._reported.add(reason)
            log.info("NVML unavailable, GPUs come from sysfs only: %s", reason)

    def get(self) -> tuple[ModuleType | None, str | None]:
        """(pynvml, None) when NVML is up, else (None, reason)."""
        if self._module is not None:
            return self._module, None
        now = self._clock()
        if self._failed_at is not None and now - self._failed_at < self.RETRY_SECONDS:
            return None, self._reason
        module, reason = self._initialise()
        if module is not None:
            if self._reported:
                log.info("NVML is available now")
            self._module = module
            return module, None
        self._failed_at, self._reason = now, reason
        self.report(reason)
        return None, reason


def _nvlinks(pynvml: ModuleType, handle: object) -> int:
    count = 0
    for link in range(_MAX_NVLINKS):
        try:
            if pynvml.nvmlDeviceGetNvLinkState(handle, link) == pynvml.NVML_FEATURE_ENABLED:
                count += 1
        except pynvml.NVMLError:
            break  # past the last link, or NVLink not supported at all
    return count


def _bits(words: Iterable[int]) -> frozenset[int]:
    """The set bits of NVML's array of 64-bit words, word 0 first."""
    return frozenset(
        64 * i + bit for i, word in enumerate(words) for bit in range(64) if int(word) >> bit & 1
    )


def _placement(pynvml: ModuleType, handle: object) -> dict[str, object]:
    """What NVML says of where the GPU sits; each answer on its own (a driver may know one)."""
    out: dict[str, object] = {}
    calls: dict[str, Callable[[], int | frozenset[int]]] = {
        "numa_node_id": lambda: int(pynvml.nvmlDeviceGetNumaNodeId(handle)),
        "cpu_affinity": lambda: _bits(pynvml.nvmlDeviceGetCpuAffinity(handle, _CPU_SET_WORDS)),
        "memory_affinity": lambda: _bits(pynvml.nvmlDeviceGetMemoryAffinity(
            handle, _NODE_SET_WORDS, pynvml.NVML_AFFINITY_SCOPE_NODE)),
    }  # fmt: skip
    for name, call in calls.items():
        try:
            value = call()
        except (pynvml.NVMLError, AttributeError):  # NOT_SUPPORTED, or an older pynvml
            continue
        if not (isinstance(value, int) and value < 0) and value != frozenset():
            out[name] = value  # an empty mask or node -1 says nothing
    return out


def _read_gpus(pynvml: ModuleType) -> tuple[dict[str, NvmlGpu], str | None]:
    gpus: dict[str, NvmlGpu] = {}
    driver = _text(pynvml.nvmlSystemGetDriverVersion())
    for index in range(pynvml.nvmlDeviceGetCount()):
        handle = pynvml.nvmlDeviceGetHandleByIndex(index)
        bdf = normalize_bus_id(pynvml.nvmlDeviceGetPciInfo(handle).busId)
        gpus[bdf] = NvmlGpu(
            bdf=bdf,
            name=_text(pynvml.nvmlDeviceGetName(handle)),
            uuid=_text(pynvml.nvmlDeviceGetUUID(handle)),
            memory_bytes=int(pynvml.nvmlDeviceGetMemoryInfo(handle).total),
            nvlinks=_nvlinks(pynvml, handle),
            **_placement(pynvml, handle),  # type: ignore[arg-type]
        )
    return gpus, driver


_SESSION = NvmlSession()  # NVML's own state is per process; so is this


def shared_session() -> NvmlSession:
    """The process's NVML session (the position source asks the same NVML)."""
    return _SESSION


def discover(*, enabled: bool = True, session: NvmlSession | None = None) -> NvmlInfo:
    if not enabled:
        return NvmlInfo(gpus={}, driver_version=None, reason="disabled (--no-nvml)")
    session = session or _SESSION
    pynvml, reason = session.get()
    if pynvml is None:
        return NvmlInfo(gpus={}, driver_version=None, reason=reason)
    try:
        gpus, driver = _read_gpus(pynvml)
    except pynvml.NVMLError as e:  # a GPU fell off the bus, the driver is resetting…
        reason = f"NVML query failed: {e}"
        session.report(reason)
        return NvmlInfo(gpus={}, driver_version=None, reason=reason)
    return NvmlInfo(gpus=gpus, driver_version=driver, reason=None)
