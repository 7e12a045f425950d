"""The one request sum (webhook/placement_model/requests.py pod_requests) against the tables of
k8s.io/component-helpers resource/helpers_test.go: init containers, native sidecars
(restartPolicy Always init containers), overhead and pod-level resources.

Units are the model's: cpu in millicores, the rest in whole units (bytes).
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.webhook.placement_model.upstream import HELPERS, case, container
from webhook.placement_model.requests import aligned_units, pod_requests

AND_LIMITS = f"{HELPERS} resource/helpers_test.go TestPodRequestsAndLimits"
NO_OVERHEAD = f"{HELPERS} resource/helpers_test.go TestPodRequestsAndLimitsWithoutOverhead"
REQUESTS = f"{HELPERS} resource/helpers_test.go TestPodResourceRequests"
POD_LEVEL = f"{HELPERS} resource/helpers_test.go TestPodLevelResourceRequests"

MI, GI = 2**20, 2**30


def sidecar(requests: dict[str, Any]) -> dict[str, Any]:
    return container(requests, restartPolicy="Always")


def limited(requests: dict[str, Any], limits: dict[str, Any]) -> dict[str, Any]:
    found = container(requests)
    found["resources"]["limits"] = {k: str(v) for k, v in limits.items()}
    return found


def get_pod(requests: dict[str, Any], limits: dict[str, Any], overhead: dict[str, Any]) -> dict:
    """helpers_test.go getPod: one container and one init container alike, and overhead."""
    return {
        "containers": [limited(requests, limits)],
        "initContainers": [limited(requests, limits)],
        "overhead": {k: str(v) for k, v in overhead.items()},
    }


def spec(
    containers: list[dict[str, Any]] = (),  # type: ignore[assignment]
    init: list[dict[str, Any]] = (),  # type: ignore[assignment]
    *,
    overhead: dict[str, Any] | None = None,
    pod_level: dict[str, dict[str, Any]] | None = None,
) -> dict[str, Any]:
    found: dict[str, Any] = {"containers": list(containers), "initContainers": list(init)}
    if overhead:
        found["overhead"] = {k: str(v) for k, v in overhead.items()}
    if pod_level is not None:
        found["resources"] = {
            part: {k: str(v) for k, v in amounts.items()} for part, amounts in pod_level.items()
        }
    return found


CASES = [
    case(AND_LIMITS, "just-overhead",
         get_pod({}, {}, {"cpu": 5, "memory": 5}), {"cpu": 5000, "memory": 5}),
    case(AND_LIMITS, "req-and-overhead",
         get_pod({"cpu": 1, "memory": 10}, {}, {"cpu": 5, "memory": 5}),
         {"cpu": 6000, "memory": 15}),
    case(AND_LIMITS, "all-req-lim-and-overhead",
         get_pod({"cpu": 1, "memory": 10}, {"cpu": 2, "memory": 12}, {"cpu": 5, "memory": 5}),
         {"cpu": 6000, "memory": 15}),
    case(AND_LIMITS, "req-some-lim-and-overhead",
         get_pod({"cpu": 1, "memory": 10}, {"cpu": 2}, {"cpu": 5, "memory": 5}),
         {"cpu": 6000, "memory": 15}),
    case(NO_OVERHEAD, "two container no overhead - should just be sum of containers",
         spec([limited({"cpu": 1, "memory": 5}, {"cpu": 2, "memory": 10}),
               limited({"cpu": 4, "memory": 12}, {"cpu": 8, "memory": 24})]),
         {"cpu": 5000, "memory": 17}),
    case(REQUESTS, "nil options, larger init container",
         spec([container({"cpu": 1})], [container({"cpu": 4})]), {"cpu": 4000}),
    case(REQUESTS, "nil options, larger containers",
         spec([container({"cpu": 2}), container({"cpu": 3})], [container({"cpu": 2})]),
         {"cpu": 5000}),
    case(REQUESTS, "pod overhead included",
         spec([container({"cpu": 2}), container({"cpu": 3})],
              [limited({"cpu": 2}, {"cpu": 2})], overhead={"cpu": 1, "memory": "1Gi"}),
         {"cpu": 6000, "memory": GI}),
    # The model reads the spec only, which is what these two ask of PodRequests.
    case(REQUESTS, "resized, infeasible, but don't use status",
         spec([container({"cpu": 4})]), {"cpu": 4000}),
    case(REQUESTS, "resized, restartable init container, infeasible, but don't use status",
         spec([], [sidecar({"cpu": 4})]), {"cpu": 4000}),
    case(REQUESTS, "restartable init container",
         spec([container({"cpu": 1})], [sidecar({"cpu": 1})]), {"cpu": 2000}),
    case(REQUESTS, "multiple restartable init containers",
         spec([container({"cpu": 1})], [container({"cpu": 5}), sidecar({"cpu": 1}),
                                        sidecar({"cpu": 2}), sidecar({"cpu": 3})]),
         {"cpu": 7000}),
    case(REQUESTS, "multiple restartable and regular init containers",
         spec([container({"cpu": 1})], [container({"cpu": 5}), sidecar({"cpu": 1}),
                                        sidecar({"cpu": 2}), container({"cpu": 5}),
                                        sidecar({"cpu": 3})]),
         {"cpu": 8000}),
    case(REQUESTS, "restartable-init, init and regular",
         spec([container({"cpu": 100})], [sidecar({"cpu": 10}), container({"cpu": 200})]),
         {"cpu": 210000}),
    case(POD_LEVEL, "nil", spec(pod_level={}), {}),
    case(POD_LEVEL, "pod level memory resource with SkipPodLevelResources false",
         spec(pod_level={"requests": {"memory": "2Mi"}}), {"memory": 2 * MI}),
    case(POD_LEVEL, "pod level memory and container level cpu resources with "
         "SkipPodLevelResources false",
         spec([container({"cpu": "2m"})], pod_level={"requests": {"memory": "2Mi"}}),
         {"memory": 2 * MI, "cpu": 2}),
    case(POD_LEVEL, "pod level unsupported resources set at pod-level with "
         "SkipPodLevelResources false",
         spec([container({"memory": "3Mi"})], pod_level={"requests": {"storage": "2Mi"}}),
         {"memory": 3 * MI}),
    case(POD_LEVEL, "only container level resources set with SkipPodLevelResources false",
         spec([container({"memory": "3Mi", "cpu": "2m"})]), {"memory": 3 * MI, "cpu": 2}),
    case(POD_LEVEL, "both container-level and pod-level resources set with "
         "SkipPodLevelResources false",
         spec([container({"memory": "3Mi", "cpu": "2m"})],
              pod_level={"requests": {"memory": "6Mi", "cpu": "8m"}}),
         {"memory": 6 * MI, "cpu": 8}),
    case(POD_LEVEL, "container-level resources and init container set with "
         "SkipPodLevelResources false",
         spec([container({"memory": "3Mi", "cpu": "2m"})],
              [container({"memory": "5Mi", "cpu": "4m"})]),
         {"memory": 5 * MI, "cpu": 4}),
    case(POD_LEVEL, "container-level resources and sidecar container set with "
         "SkipPodLevelResources false",
         spec([container({"memory": "3Mi", "cpu": "2m"})],
              [sidecar({"memory": "5Mi", "cpu": "4m"})]),
         {"memory": 8 * MI, "cpu": 6}),
    case(POD_LEVEL, "container-level resources, init and sidecar container set with "
         "SkipPodLevelResources false",
         spec([container({"memory": "3Mi", "cpu": "2m"})],
              [sidecar({"memory": "5Mi", "cpu": "4m"}),
               container({"memory": "6Mi", "cpu": "8m"})]),
         {"memory": 11 * MI, "cpu": 12}),
    case(POD_LEVEL, "pod-level resources, container-level resources, init and sidecar "
         "container set with SkipPodLevelResources false",
         spec([container({"memory": "3Mi", "cpu": "2m"})],
              [sidecar({"memory": "5Mi", "cpu": "4m"}),
               container({"memory": "6Mi", "cpu": "8m"})],
              pod_level={"requests": {"memory": "15Mi", "cpu": "18m"}}),
         {"memory": 15 * MI, "cpu": 18}),
    case(POD_LEVEL, "pod-level resources, hugepage request/limit single page size",
         spec(pod_level={"limits": {"hugepages-2Mi": "2Mi"},
                         "requests": {"memory": "10Mi", "hugepages-2Mi": "2Mi"}}),
         {"memory": 10 * MI, "hugepages-2Mi": 2 * MI}),
    case(POD_LEVEL, "pod-level resources, hugepage request/limit multiple page sizes",
         spec(pod_level={"limits": {"hugepages-2Mi": "2Mi", "hugepages-1Gi": "1Gi"},
                         "requests": {"cpu": 1, "hugepages-2Mi": "2Mi", "hugepages-1Gi": "1Gi"}}),
         {"cpu": 1000, "hugepages-2Mi": 2 * MI, "hugepages-1Gi": GI}),
    case(POD_LEVEL, "pod-level resources, container-level resources, hugepage request/limit "
         "single page size",
         spec([limited({"hugepages-2Mi": "6Mi"}, {"hugepages-2Mi": "6Mi"})],
              pod_level={"limits": {"hugepages-2Mi": "10Mi"},
                         "requests": {"cpu": 1, "hugepages-2Mi": "10Mi"}}),
         {"cpu": 1000, "hugepages-2Mi": 10 * MI}),
    case(POD_LEVEL, "pod-level resources, container-level resources, hugepage request/limit "
         "multiple page sizes",
         spec([limited({"cpu": 1, "hugepages-1Gi": "2Gi"}, {"hugepages-1Gi": "2Gi"})],
              pod_level={"limits": {"hugepages-2Mi": "10Mi", "hugepages-1Gi": "2Gi"},
                         "requests": {"cpu": 1, "hugepages-2Mi": "10Mi",
                                      "hugepages-1Gi": "2Gi"}}),
         {"cpu": 1000, "hugepages-2Mi": 10 * MI, "hugepages-1Gi": 2 * GI}),
    case(POD_LEVEL, "pod-level resources, container-level resources, hugepage request/limit "
         "multiple page sizes between pod-level and container-level",
         spec([limited({"memory": "4Mi", "hugepages-1Gi": "1Gi"}, {"hugepages-1Gi": "1Gi"})],
              pod_level={"limits": {"hugepages-2Mi": "10Mi"},
                         "requests": {"cpu": 1, "hugepages-2Mi": "10Mi"}}),
         {"cpu": 1000, "memory": 4 * MI, "hugepages-2Mi": 10 * MI, "hugepages-1Gi": GI}),
]  # fmt: skip


@pytest.mark.parametrize(("pod_spec", "want"), CASES)
def test_pod_requests(pod_spec: dict[str, Any], want: dict[str, int]) -> None:
    assert pod_requests(pod_spec) == want


SUPPORTED = f"{HELPERS} resource/helpers_test.go TestIsSupportedPodLevelResource"


@pytest.mark.parametrize(
    ("resource", "supported"),
    [case(SUPPORTED, "cpu", "cpu", True), case(SUPPORTED, "memory", "memory", True),
     case(SUPPORTED, "ephemeral-storage", "ephemeral-storage", False),
     case(SUPPORTED, "hugepages-2Mi", "hugepages-2Mi", True),
     case(SUPPORTED, "hugepages-1Gi", "hugepages-1Gi", True)],
)  # fmt: skip
def test_only_supported_pod_level_resources_replace_the_container_sum(
    resource: str, supported: bool
) -> None:
    pod_spec = spec([container({resource: "1Gi"})], pod_level={"requests": {resource: "2Gi"}})
    units = GI if resource != "cpu" else GI * 1000
    assert pod_requests(pod_spec)[resource] == (2 if supported else 1) * units


SET = f"{HELPERS} resource/helpers_test.go TestIsPodLevelResourcesSet"


@pytest.mark.parametrize(
    ("pod_level", "is_set"),
    [case(SET, "nil resources struct", None, False),
     case(SET, "empty resources struct", {}, False),
     case(SET, "only unsupported resource requests set",
          {"requests": {"ephemeral-storage": "1Mi"}}, False),
     case(SET, "only unsupported resource limits set",
          {"limits": {"ephemeral-storage": "1Mi"}}, False),
     case(SET, "unsupported and suported resources requests set",
          {"requests": {"ephemeral-storage": "1Mi", "cpu": "1m"}}, True),
     case(SET, "unsupported and suported resources limits set",
          {"limits": {"ephemeral-storage": "1Mi", "cpu": "1m"}}, True)],
)  # fmt: skip
def test_pod_level_resources_set_only_with_a_supported_resource(
    pod_level: dict[str, dict[str, Any]] | None, is_set: bool
) -> None:
    """Seen where it matters: a Guaranteed pod's whole CPUs get the static CPU manager's
    NUMA hints only without pod-level resources (aligned_units)."""
    whole = {"cpu": 4, "memory": "1Gi"}
    pod_spec = spec([limited(whole, whole)], pod_level=pod_level)
    pod_unit, _ = aligned_units(pod_spec)
    assert ("cpu" in pod_unit[0].amounts if pod_unit else False) is not is_set


KEP = (
    "kubernetes/enhancements@64765b4b keps/sig-node/2837-pod-level-resource-spec "
    "Clarifying Tricky Cases"
)


@pytest.mark.parametrize(
    ("pod_spec", "want"),
    [case(KEP, "1. Pod Limits Defined; Pod Requests & Container Specs Unspecified",
          spec([container(), container()], pod_level={"limits": {"memory": "100Gi"}}),
          {"memory": 100 * GI}),
     case(KEP, "3. Pod Limit is set; Container Requests are set for both regular containers",
          spec([container({"memory": "50Gi"}), container({"memory": "50Gi"})],
               pod_level={"limits": {"memory": "200Gi"}}),
          {"memory": 100 * GI}),
     case(KEP, "6. Pod-level Limit is set; Container Requests & Limits are set for 1 regular "
          "container", spec([limited({"memory": "50Gi"}, {"memory": "50Gi"}), container()],
                            pod_level={"limits": {"memory": "100Gi"}}),
          {"memory": 50 * GI}),
     # hugepages are never overcommitted: their pod-level request is the pod-level limit
     # (apiserver's TestPodLevelResourcesDefaults "pod-level resources hugepages-2Mi:L,
     # container hugepages-2Mi:L" is valid only so).
     case(KEP, "Hugepages: the pod-level limit, whatever the containers ask",
          spec([limited({"cpu": 1, "memory": "100Mi"},
                        {"cpu": 1, "memory": "100Mi", "hugepages-2Mi": "2Mi"})],
               pod_level={"limits": {"cpu": 1, "memory": "100Mi", "hugepages-2Mi": "10Mi"},
                          "requests": {"cpu": 1, "memory": "100Mi"}}),
          {"cpu": 1000, "memory": 100 * MI, "hugepages-2Mi": 10 * MI})],
)  # fmt: skip
def test_pod_level_requests_default_from_the_containers_before_the_limit(
    pod_spec: dict[str, Any], want: dict[str, int]
) -> None:
    assert pod_requests(pod_spec) == want
