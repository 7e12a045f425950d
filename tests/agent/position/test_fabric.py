"""The NVLink domain from NVML's fabric info, through the real pynvml over a stand-in library."""

from __future__ import annotations

import uuid

import pynvml

from agent.position.fabric import nvlink_domain
from tests.agent.position.nvml_standin import FabricGpu, standin_nvml

CLUSTER = uuid.UUID("7f3c2a10-5b4e-4d6a-9c1e-2b8f0e6d4a91")


def test_every_gpu_registered_in_one_clique_gives_gfds_value() -> None:
    calls: list[str] = []
    with standin_nvml([FabricGpu(CLUSTER, 3)] * 4, calls) as nvml:
        found = nvlink_domain(nvml)
    assert found.domain == f"{CLUSTER}.3"  # what GFD writes as nvidia.com/gpu.clique
    assert found.reason is None
    assert [c for c in calls if c.startswith("fabric")] == [f"fabric {i}" for i in range(4)]


def test_a_gpu_still_registering_leaves_the_domain_unknown() -> None:
    gpus = [FabricGpu(CLUSTER, 1), FabricGpu(state=pynvml.NVML_GPU_FABRIC_STATE_IN_PROGRESS)]
    with standin_nvml(gpus) as nvml:
        found = nvlink_domain(nvml)
    assert found.domain is None
    assert "GPU 1" in (found.reason or "") and "not complete" in (found.reason or "")


def test_a_failed_registration_or_a_zero_uuid_is_no_domain() -> None:
    failed = FabricGpu(CLUSTER, 1, status=pynvml.NVML_ERROR_UNKNOWN)
    with standin_nvml([failed]) as nvml:
        assert "failed" in (nvlink_domain(nvml).reason or "")
    with standin_nvml([FabricGpu(None, 1)]) as nvml:
        assert nvlink_domain(nvml).domain is None


def test_gpus_split_over_two_cliques_publish_nothing() -> None:
    with standin_nvml([FabricGpu(CLUSTER, 1), FabricGpu(CLUSTER, 2)]) as nvml:
        found = nvlink_domain(nvml)
    assert found.domain is None
    assert "several NVLink domains" in (found.reason or "")


def test_gpus_without_multi_node_nvlink_are_a_quiet_no() -> None:
    with standin_nvml([FabricGpu(answer=pynvml.NVML_ERROR_NOT_SUPPORTED)] * 2) as nvml:
        found = nvlink_domain(nvml)
    assert (found.domain, found.reason) == (None, "no multi-node NVLink")
    with standin_nvml([FabricGpu(state=pynvml.NVML_GPU_FABRIC_STATE_NOT_SUPPORTED)]) as nvml:
        assert nvlink_domain(nvml).domain is None
    with standin_nvml([]) as nvml:
        assert nvlink_domain(nvml).reason == "no GPU"
