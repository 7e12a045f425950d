"""The kubelet cases of tests/e2e/test_memory_only_kubelets.py and what the real kubelets
v1.37.2 did in them (docs/memory-only-numa.md): data only, also what the placement model's
tests hold the model to (tests/webhook/placement_model/test_memory_only_model.py)."""

from __future__ import annotations

from typing import Any

__all__ = ["CASES", "EXPECTED", "PODS"]

_BASE = {
    "cpuManagerPolicy": "static",
    "reservedSystemCPUs": "0,1",
    "topologyManagerPolicy": "restricted",
    "topologyManagerScope": "pod",
}
_STATIC_MEMORY = {"memoryManagerPolicy": "Static"}


def _max(n: int) -> dict[str, Any]:
    return {"topologyManagerPolicyOptions": {"max-allowable-numa-nodes": str(n)}}


# Pods: (GPUs, CPUs, memory). "wide": CPUs past one Grace's 70 free; "big": memory past one
# CPU node's (472 GiB on a Grace, 256 GiB on a CXL server socket).
PODS = {
    "1gpu": (1, 8, "32Gi"),
    "2gpu": (2, 16, "64Gi"),
    "4gpu": (4, 32, "128Gi"),
    "4gpu-wide": (4, 100, "128Gi"),
    "1gpu-big": (1, 8, "500Gi"),
}
# node name: (machine, kubelet fields, pods to try)
CASES: dict[str, tuple[str, dict[str, Any], tuple[str, ...]]] = {
    "gb200-default": ("gb200-tray", _BASE, ()),
    "gb200-max33": ("gb200-tray", _BASE | _max(33), ()),
    "gb200-max34": ("gb200-tray", _BASE | _max(34), tuple(PODS)),
    "gb200-snn-max34": (
        "gb200-tray",
        _BASE | _max(34) | {"topologyManagerPolicy": "single-numa-node"},
        ("1gpu", "2gpu", "4gpu"),
    ),
    "gh200-default": ("gh200", _BASE | _STATIC_MEMORY, ()),
    "gh200-max9-static": ("gh200", _BASE | _STATIC_MEMORY | _max(9), ("1gpu", "1gpu-big")),
    "gh200-max9": ("gh200", _BASE | _max(9), ("1gpu", "1gpu-big")),
    "cxl-static": ("cxl-server", _BASE | _STATIC_MEMORY, tuple(PODS)),
    "cxl": ("cxl-server", _BASE, ("4gpu", "1gpu-big")),
}
# What the kubelets did (docs/memory-only-numa.md): started or the reason it did not, the
# NUMA nodes its memory manager keeps state for (Static only), and per pod the outcome.
EXPECTED: dict[str, dict[str, Any]] = {
    "gb200-default": {"start": "unsupported on machines with more than 8 NUMA Nodes"},
    "gb200-max33": {"start": "unsupported on machines with more than 33 NUMA Nodes"},
    "gb200-max34": {"start": "ok", "pods": {
        "1gpu": "Running", "2gpu": "Running", "4gpu": "TopologyAffinityError",
        "4gpu-wide": "Running", "1gpu-big": "Running"}},
    "gb200-snn-max34": {"start": "ok", "pods": {
        "1gpu": "Running", "2gpu": "Running", "4gpu": "TopologyAffinityError"}},
    "gh200-default": {"start": "unsupported on machines with more than 8 NUMA Nodes"},
    "gh200-max9-static": {"start": "ok", "memory_numa": list(range(9)), "pods": {
        "1gpu": "Running", "1gpu-big": "TopologyAffinityError"}},
    "gh200-max9": {"start": "ok", "pods": {"1gpu": "Running", "1gpu-big": "Running"}},
    "cxl-static": {"start": "ok", "memory_numa": [0, 1, 2], "pods": {
        "1gpu": "Running", "2gpu": "Running", "4gpu": "TopologyAffinityError",
        "4gpu-wide": "TopologyAffinityError", "1gpu-big": "TopologyAffinityError"}},
    "cxl": {"start": "ok", "pods": {"4gpu": "TopologyAffinityError", "1gpu-big": "Running"}},
}  # fmt: skip
