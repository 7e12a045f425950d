"""The kubelet-truth scenario's random pods (tests/e2e/random_pods.py): replayable case by
case, within the issue's bounds, and spread over what admission turns on."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

from tests.e2e.random_pods import GI, GPU, RDMA, NodeShape, ZoneShape, draw, summary
from tests.kube import assert_valid, parse_quantity, qos_class

H100 = NodeShape("h100", (ZoneShape(110, 982 * GI, 4, 6), ZoneShape(112, 984 * GI, 4, 6)))
A100 = NodeShape(
    "a100",
    tuple(ZoneShape(30 if i == 0 else 32, 122 * GI, 2 * (i % 2), 2 * (i % 2)) for i in range(8)),
)
SHAPES = [H100, A100]


def _total(pod: dict[str, Any], name: str) -> Decimal:
    containers = pod["spec"]["containers"] + pod["spec"].get("initContainers", [])
    return sum(
        (parse_quantity(c["resources"].get("requests", {}).get(name, 0)) for c in containers),
        Decimal(0),
    )


def test_a_case_is_the_same_whatever_else_is_drawn() -> None:
    assert draw(5, 17, SHAPES) == draw(5, 17, list(reversed(SHAPES)))
    assert draw(5, 17, SHAPES) != draw(6, 17, SHAPES)


def test_pods_are_valid_and_within_the_issues_bounds() -> None:
    cases = [draw(1, i, SHAPES) for i in range(300)]
    for case in cases:
        assert_valid(case.pod)
        spec = case.pod["spec"]
        assert (
            "nodeName" not in spec and "topoplace.io/policy" not in case.pod["metadata"]["labels"]
        )
        assert 1 <= len(spec["containers"]) + len(spec.get("initContainers", [])) <= 2
        gpus = sum(int(c["resources"].get("limits", {}).get(GPU, 0)) for c in spec["containers"])
        assert 0 <= gpus <= 8, summary(case.pod)
        for c in spec["containers"] + spec.get("initContainers", []):
            res = c["resources"]
            assert 1 <= parse_quantity(res["requests"]["cpu"]) <= 204, summary(case.pod)
            assert parse_quantity(res["requests"]["memory"]) <= Decimal(1126 * GI)
            for device in (GPU, RDMA):  # extended resources: request == limit, or none
                assert res["requests"].get(device) == res.get("limits", {}).get(device)
            if qos_class(case.pod) == "Guaranteed":
                assert res["requests"] == res["limits"] and "m" not in res["requests"]["cpu"]
    qos = [qos_class(c.pod) for c in cases]
    assert 0.4 < qos.count("Guaranteed") / len(cases) < 0.8 and "BestEffort" not in qos
    assert {c.node for c in cases} == {"h100", "a100"}
    assert any(_total(c.pod, RDMA) for c in cases)
    assert any(c.pod["spec"].get("initContainers") for c in cases)


def test_most_pods_are_near_one_or_two_numa_nodes() -> None:
    """Where the kubelet's answer turns: a NUMA node's CPUs or GPUs, or two."""
    cases = [draw(2, i, [A100]) for i in range(300)]
    near = [c for c in cases if 24 <= _total(c.pod, "cpu") <= 72 or _total(c.pod, GPU) >= 2]
    assert len(near) > 0.6 * len(cases)
    gpus = {int(_total(c.pod, GPU)) for c in cases}
    assert {1, 2, 3, 4} <= gpus
