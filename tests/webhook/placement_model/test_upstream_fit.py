"""kube-scheduler's NodeResourcesFit filter tables, ported onto explain's resource checks
(webhook/nodefit/checks.py plan_for, webhook/nodefit/node_verdict.py failure) and the one request
sum they read.

Source: kubernetes/kubernetes pkg/scheduler/framework/plugins/noderesources/fit_test.go:
TestEnoughRequests, TestNotEnoughRequests, TestStorageRequests (read at 24fbb13e), and the
pod-level resources cases of TestEnoughRequests and the sidecar cases of
TestRestartableInitContainers from a newer revision (the one with DRA extended resources).
Each case is a pod, a node with one pod already bound, and the resources upstream reports
insufficient.
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.webhook.placement_model.upstream import (
    SCHEDULER,
    case,
    container,
    fits,
    node,
    plan,
    with_pods,
)
from webhook.nodefit.node_verdict import evaluate, failure
from webhook.placement_model.filters.nodes import NodeView

FIT = f"{SCHEDULER}/noderesources/fit_test.go"
ENOUGH = f"{FIT} TestEnoughRequests"
NOT_ENOUGH = f"{FIT} TestNotEnoughRequests"
STORAGE = f"{FIT} TestStorageRequests"
SIDECARS = f"{FIT} TestRestartableInitContainers"

EXT_A, EXT_B = "example.com/aaa", "example.com/bbb"
K8S_A, K8S_B = "kubernetes.io/something", "subdomain.kubernetes.io/something"
HUGE_A = "hugepages-2Mi"


def use(
    cpu_m: int = 0, memory: int = 0, storage: int = 0, scalars: dict[str, int] | None = None
) -> dict[str, Any]:
    """fit_test.go's newResourcePod container: cpu, memory, pods and ephemeral-storage always
    written (zero when not given), then the scalar resources."""
    amounts = {"cpu": f"{cpu_m}m", "memory": memory, "pods": 0, "ephemeral-storage": storage}
    return container({**amounts, **(scalars or {})})


def pod(*containers: dict[str, Any], init: tuple[dict[str, Any], ...] = (),
        overhead: dict[str, str] | None = None,
        pod_level: dict[str, Any] | None = None) -> dict[str, Any]:  # fmt: skip
    found: dict[str, Any] = {"containers": list(containers)}
    if init:
        found["initContainers"] = list(init)
    if overhead:
        found["overhead"] = overhead
    if pod_level:
        found["resources"] = {"requests": {k: str(v) for k, v in pod_level.items()}}
    return found


def fit_node(cpu_m: int, memory: int, pods: int, ext_a: int, storage: int, huge: int) -> NodeView:
    """fit_test.go's makeAllocatableResources."""
    return node("node", allocatable={
        "cpu": f"{cpu_m}m", "memory": memory, "pods": pods, EXT_A: ext_a,
        "ephemeral-storage": storage, HUGE_A: huge,
    })  # fmt: skip


def a(n: int) -> dict[str, int]:
    return {EXT_A: n}


ENOUGH_CASES = [
    case(ENOUGH, "no resources requested always fits", pod(), pod(use(10, 20)), []),
    case(ENOUGH, "too many resources fails", pod(use(1, 1)), pod(use(10, 20)), ["cpu", "memory"]),
    case(ENOUGH, "too many resources fails due to init container cpu",
         pod(use(1, 1), init=(use(3, 1),)), pod(use(8, 19)), ["cpu"]),
    case(ENOUGH, "too many resources fails due to highest init container cpu",
         pod(use(1, 1), init=(use(3, 1), use(2, 1))), pod(use(8, 19)), ["cpu"]),
    case(ENOUGH, "too many resources fails due to init container memory",
         pod(use(1, 1), init=(use(1, 3),)), pod(use(9, 19)), ["memory"]),
    case(ENOUGH, "too many resources fails due to highest init container memory",
         pod(use(1, 1), init=(use(1, 3), use(1, 2))), pod(use(9, 19)), ["memory"]),
    case(ENOUGH, "init container fits because it's the max, not sum, of containers and init "
         "containers", pod(use(1, 1), init=(use(1, 1),)), pod(use(9, 19)), []),
    case(ENOUGH, "multiple init containers fit because it's the max, not sum, of containers and "
         "init containers", pod(use(1, 1), init=(use(1, 1), use(1, 1))), pod(use(9, 19)), []),
    case(ENOUGH, "both resources fit", pod(use(1, 1)), pod(use(5, 5)), []),
    case(ENOUGH, "one resource memory fits", pod(use(2, 1)), pod(use(9, 5)), ["cpu"]),
    case(ENOUGH, "one resource cpu fits", pod(use(1, 2)), pod(use(5, 19)), ["memory"]),
    case(ENOUGH, "equal edge case", pod(use(5, 1)), pod(use(5, 19)), []),
    case(ENOUGH, "equal edge case for init container",
         pod(use(4, 1), init=(use(5, 1),)), pod(use(5, 19)), []),
    case(ENOUGH, "extended resource fits", pod(use(scalars=a(1))), pod(use()), []),
    case(ENOUGH, "extended resource fits for init container",
         pod(use(), init=(use(scalars=a(1)),)), pod(use()), []),
    case(ENOUGH, "extended resource capacity enforced",
         pod(use(1, 1, scalars=a(10))), pod(use(scalars=a(0))), [EXT_A]),
    case(ENOUGH, "extended resource capacity enforced for init container",
         pod(use(), init=(use(1, 1, scalars=a(10)),)), pod(use(scalars=a(0))), [EXT_A]),
    case(ENOUGH, "extended resource allocatable enforced",
         pod(use(1, 1, scalars=a(1))), pod(use(scalars=a(5))), [EXT_A]),
    case(ENOUGH, "extended resource allocatable enforced for init container",
         pod(use(), init=(use(1, 1, scalars=a(1)),)), pod(use(scalars=a(5))), [EXT_A]),
    case(ENOUGH, "extended resource allocatable enforced for multiple containers",
         pod(use(1, 1, scalars=a(3)), use(1, 1, scalars=a(3))), pod(use(scalars=a(2))), [EXT_A]),
    case(ENOUGH, "extended resource allocatable admits multiple init containers",
         pod(use(), init=(use(1, 1, scalars=a(3)), use(1, 1, scalars=a(3)))),
         pod(use(scalars=a(2))), []),
    case(ENOUGH, "extended resource allocatable enforced for multiple init containers",
         pod(use(), init=(use(1, 1, scalars=a(6)), use(1, 1, scalars=a(3)))),
         pod(use(scalars=a(2))), [EXT_A]),
    case(ENOUGH, "extended resource allocatable enforced for unknown resource",
         pod(use(1, 1, scalars={EXT_B: 1})), pod(use()), [EXT_B]),
    case(ENOUGH, "extended resource allocatable enforced for unknown resource for init container",
         pod(use(), init=(use(1, 1, scalars={EXT_B: 1}),)), pod(use()), [EXT_B]),
    case(ENOUGH, "kubernetes.io resource capacity enforced",
         pod(use(1, 1, scalars={K8S_A: 10})), pod(use()), [K8S_A]),
    case(ENOUGH, "kubernetes.io resource capacity enforced for init container",
         pod(use(), init=(use(1, 1, scalars={K8S_B: 10}),)), pod(use()),
         [K8S_B]),
    case(ENOUGH, "hugepages resource capacity enforced",
         pod(use(1, 1, scalars={HUGE_A: 10})), pod(use(scalars={HUGE_A: 0})), [HUGE_A]),
    case(ENOUGH, "hugepages resource capacity enforced for init container",
         pod(use(), init=(use(1, 1, scalars={HUGE_A: 10}),)),
         pod(use(scalars={HUGE_A: 0})), [HUGE_A]),
    case(ENOUGH, "hugepages resource allocatable enforced for multiple containers",
         pod(use(1, 1, scalars={HUGE_A: 3}), use(1, 1, scalars={HUGE_A: 3})),
         pod(use(scalars={HUGE_A: 2})), [HUGE_A]),
    case(ENOUGH, "resources + pod overhead fits",
         pod(use(1, 1), overhead={"cpu": "3m", "memory": "13"}), pod(use(5, 5)), []),
    case(ENOUGH, "requests + overhead does not fit for memory",
         pod(use(1, 1), overhead={"cpu": "1m", "memory": "15"}), pod(use(5, 5)), ["memory"]),
    case(ENOUGH, "skip checking extended resource request with quantity zero via resource groups",
         pod(use(1, 1, scalars=a(0))), pod(use(scalars=a(6))), []),
    case(ENOUGH, "skip checking resource request with quantity zero",
         pod(use(scalars=a(1))), pod(use(20, 30, scalars=a(1))), []),
    case(ENOUGH, "both pod-level and container-level resources fit",
         pod(use(1, 1), pod_level={"cpu": "1m", "memory": 2}), pod(use(5, 5)), []),
    case(ENOUGH, "pod-level cpu resource not fit",
         pod(use(1, 1), pod_level={"cpu": "7m", "memory": 2}), pod(use(5, 5)), ["cpu"]),
    case(ENOUGH, "pod-level memory resource not fit",
         pod(use(1, 1), pod_level={"cpu": "3m", "memory": 2}), pod(use(5, 19)), ["memory"]),
    case(ENOUGH, "pod-level hugepages resource fit",
         pod(pod_level={"cpu": "3m", "memory": 2, HUGE_A: 5}), None, []),
    case(ENOUGH, "both pod-level and container-level hugepages resource fit",
         pod(use(1, 1, scalars={HUGE_A: 3}), pod_level={"cpu": "3m", "memory": 2, HUGE_A: 5}),
         None, []),
    case(ENOUGH, "pod-level hugepages resource not fit",
         pod(pod_level={"cpu": "3m", "memory": 2, HUGE_A: 10}), None, [HUGE_A]),
    case(ENOUGH, "one pod-level cpu resource fits and all init and non-init containers resources "
         "fit", pod(use(1, 1), init=(use(1, 1),), pod_level={"cpu": "3m", "memory": 2}),
         pod(use(5, 19)), ["memory"]),
    case(STORAGE, "empty storage requested, and pod fits", pod(use(1, 1)), pod(use(2, 10)), []),
    case(STORAGE, "storage ephemeral local storage request exceeds allocatable",
         pod(use(storage=25)), pod(use(2, 2)), ["ephemeral-storage"]),
    case(STORAGE, "ephemeral local storage is sufficient",
         pod(use(storage=5)), pod(use(2, 2, 10)), []),
    case(STORAGE, "pod fits", pod(use(storage=10)), pod(use(2, 2)), []),
]  # fmt: skip


def insufficient(spec: dict[str, Any], view: NodeView) -> list[str]:
    """The resources the pod's checks find short on the node, as NodeResourcesFit lists them."""
    judged = plan(spec)
    short = [c.resource for c in judged.checks
             if c.kind == "resource" and failure(c, view, judged) is not None]  # fmt: skip
    assert fits(spec, view) is not short  # explain's verdict (and the index's, on an idle node)
    return sorted(short)


@pytest.mark.parametrize(("spec", "bound", "want"), ENOUGH_CASES)
def test_enough_requests(
    spec: dict[str, Any], bound: dict[str, Any] | None, want: list[str]
) -> None:
    view = fit_node(10, 20, 32, 5, 20, 5)
    if bound is not None:
        view = with_pods(view, bound)
    assert insufficient(spec, view) == sorted(want)


NOT_ENOUGH_CASES = [
    case(NOT_ENOUGH, "even without specified resources, predicate fails when there's no space "
         "for additional pod", pod(), pod(use(10, 20))),
    case(NOT_ENOUGH, "even if both resources fit, predicate fails when there's no space for "
         "additional pod", pod(use(1, 1)), pod(use(5, 5))),
    case(NOT_ENOUGH, "even for equal edge case, predicate fails when there's no space for "
         "additional pod", pod(use(5, 1)), pod(use(5, 19))),
    case(NOT_ENOUGH, "even for equal edge case, predicate fails when there's no space for "
         "additional pod due to init container", pod(use(5, 1), init=(use(5, 1),)),
         pod(use(5, 19))),
]  # fmt: skip


@pytest.mark.parametrize(("spec", "bound"), NOT_ENOUGH_CASES)
def test_not_enough_requests(spec: dict[str, Any], bound: dict[str, Any]) -> None:
    """A node that allows one pod and has it: "Too many pods", whatever the pod asks."""
    view = with_pods(fit_node(10, 20, 1, 0, 0, 0), bound)
    assert insufficient(spec, view) == ["pods"]
    assert evaluate(plan(spec), view).reason == "too many pods: 1 of 1 allowed already bound"


def regular_and_sidecar(regular_m: int | None, sidecar_m: int | None) -> dict[str, Any]:
    cpu = {"cpu": f"{regular_m}m"} if regular_m is not None else None
    side = {"cpu": f"{sidecar_m}m"} if sidecar_m is not None else None
    return {"containers": [container(cpu)],
            "initContainers": [container(side, restartPolicy="Always")]}  # fmt: skip


SIDECAR_CASES = [
    case(SIDECARS, "allow pod without restartable init containers if sidecar containers is "
         "enabled", {"containers": [container()]}, []),
    case(SIDECARS, "allow pod with restartable init containers if sidecar containers is enabled",
         regular_and_sidecar(None, None), []),
    case(SIDECARS, "allow pod if the total requested resources do not exceed the node's "
         "allocatable resources", regular_and_sidecar(1, 1), []),
    case(SIDECARS, "not allow pod if the total requested resources do exceed the node's "
         "allocatable resources", regular_and_sidecar(1, 2), ["cpu"]),
]  # fmt: skip


@pytest.mark.parametrize(("spec", "want"), SIDECAR_CASES)
def test_restartable_init_containers(spec: dict[str, Any], want: list[str]) -> None:
    """A sidecar's requests add to the app containers' (2m allocatable, 1 pod allowed)."""
    assert insufficient(spec, fit_node(2, 0, 1, 0, 0, 0)) == want
