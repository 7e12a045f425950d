"""kube-scheduler's matching rules, case by case: selectors, taints, and how requests add up."""

from __future__ import annotations

from typing import Any

import pytest

from webhook.placement_model.filters.selectors import (
    parse_preferred,
    parse_required,
    parse_requirement,
    requirement_matches,
    term_matches,
)
from webhook.placement_model.filters.tolerations import (
    Taint,
    parse_taints,
    parse_tolerations,
    untolerated,
)
from webhook.placement_model.requests import pod_requests

LABELS = {"zone": "a", "gpus": "8", "odd": "eight", "big": "99999999999999999999"}


def req(key: str, op: str, *values: str) -> dict[str, Any]:
    return {"key": key, "operator": op, "values": list(values)}


@pytest.mark.parametrize(
    ("expr", "matches"),
    [
        (req("zone", "In", "a", "b"), True),
        (req("zone", "In", "b"), False),
        (req("absent", "In", "a"), False),
        (req("zone", "NotIn", "b"), True),
        (req("zone", "NotIn", "a"), False),
        (req("absent", "NotIn", "a"), True),  # NotIn matches a node without the key
        (req("zone", "Exists"), True),
        (req("absent", "Exists"), False),
        (req("absent", "DoesNotExist"), True),
        (req("zone", "DoesNotExist"), False),
        (req("gpus", "Gt", "7"), True),
        (req("gpus", "Gt", "8"), False),
        (req("gpus", "Lt", "9"), True),
        (req("gpus", "Gt", "07"), True),  # ParseInt reads leading zeros
        (req("odd", "Gt", "1"), False),  # a label that is no integer never compares
        (req("big", "Gt", "1"), False),  # beyond int64: ParseInt fails
        (req("absent", "Lt", "100"), False),  # Gt/Lt need the key
    ],
)
def test_label_requirements(expr: dict[str, Any], matches: bool) -> None:
    parsed = parse_requirement(expr)
    assert parsed.error is None
    assert requirement_matches(parsed, LABELS) is matches


@pytest.mark.parametrize(
    "expr",
    [
        req("zone", "In"),
        req("zone", "Exists", "a"),
        req("gpus", "Gt", "7", "8"),
        req("gpus", "Gt", "seven"),
        req("gpus", "Gt", "7.5"),
        # ParseInt takes a sign, but every value must also be a label value (NewRequirement)
        req("gpus", "Lt", "+8"),
        req("gpus", "Gt", "-1"),
        req("zone", "Equals", "a"),
    ],
)
def test_invalid_requirements_are_errors(expr: dict[str, Any]) -> None:
    assert parse_requirement(expr).error is not None


def affinity(*terms: dict[str, Any]) -> dict[str, Any]:
    required = {"nodeSelectorTerms": list(terms)}
    return {
        "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": required}}
    }


def matches_any(spec: dict[str, Any], labels: dict[str, str], name: str = "n1") -> bool:
    terms = parse_required(spec)
    assert terms is not None
    return any(term_matches(t, labels, name) for t in terms)


def test_terms_are_ored_and_expressions_anded() -> None:
    spec = affinity(
        {"matchExpressions": [req("zone", "In", "b")]},
        {"matchExpressions": [req("zone", "In", "a"), req("gpus", "Gt", "4")]},
    )
    assert matches_any(spec, LABELS)
    assert not matches_any(spec, {"zone": "a", "gpus": "2"})


def test_an_empty_term_matches_nothing_and_an_invalid_one_only_spoils_itself() -> None:
    assert not matches_any(affinity({}), LABELS)
    assert not matches_any(affinity({"matchExpressions": []}), LABELS)
    broken = {"matchExpressions": [req("zone", "In", "a"), req("gpus", "Gt", "x")]}
    assert not matches_any(affinity(broken), LABELS)
    assert matches_any(affinity(broken, {"matchExpressions": [req("zone", "Exists")]}), LABELS)


def test_match_fields_select_by_node_name() -> None:
    by_name = affinity({"matchFields": [req("metadata.name", "In", "n1")]})
    assert matches_any(by_name, {}, "n1")
    assert not matches_any(by_name, {}, "n2")
    not_name = affinity({"matchFields": [req("metadata.name", "NotIn", "n1")]})
    assert matches_any(not_name, {}, "n2")
    two_values = affinity({"matchFields": [req("metadata.name", "In", "n1", "n2")]})
    assert not matches_any(two_values, {}, "n1")  # matchFields take exactly one value
    exists = affinity({"matchFields": [req("metadata.name", "Exists")]})
    assert not matches_any(exists, {}, "n1")  # only In and NotIn on fields


def test_preferred_terms_with_weight_zero_or_empty_do_not_count() -> None:
    spec = {
        "affinity": {
            "nodeAffinity": {
                "preferredDuringSchedulingIgnoredDuringExecution": [
                    {"weight": 0, "preference": {"matchExpressions": [req("zone", "Exists")]}},
                    {"weight": 5, "preference": {}},
                    {"weight": 7, "preference": {"matchExpressions": [req("zone", "In", "a")]}},
                ]
            }
        }
    }
    assert [p.weight for p in parse_preferred(spec)] == [7]


def tol(**fields: str) -> dict[str, str]:
    return fields


TAINTS = {
    "taints": [
        {"key": "gpu", "value": "true", "effect": "NoSchedule"},
        {"key": "soft", "value": "x", "effect": "PreferNoSchedule"},  # never filters
    ]
}


@pytest.mark.parametrize(
    ("tolerations", "tolerated"),
    [
        ([], False),
        ([tol(key="gpu", operator="Equal", value="true", effect="NoSchedule")], True),
        ([tol(key="gpu", value="true")], True),  # no operator: Equal; no effect: every effect
        ([tol(key="gpu", value="false")], False),
        ([tol(key="gpu", operator="Exists")], True),
        ([tol(operator="Exists")], True),  # empty key with Exists tolerates every taint
        ([tol(key="gpu", operator="Exists", effect="NoExecute")], False),  # effect differs
        ([tol(key="other", operator="Exists")], False),
    ],
)
def test_tolerations(tolerations: list[dict[str, str]], tolerated: bool) -> None:
    taints = parse_taints(TAINTS)
    assert taints == (Taint("gpu", "true", "NoSchedule"),)
    found = untolerated(parse_tolerations({"tolerations": tolerations}), taints)
    assert (found is None) is tolerated


def test_numeric_toleration_operators_compare_the_taint_value() -> None:
    taints = parse_taints({"taints": [{"key": "level", "value": "5", "effect": "NoExecute"}]})
    gt = parse_tolerations({"tolerations": [tol(key="level", operator="Gt", value="4")]})
    lt = parse_tolerations({"tolerations": [tol(key="level", operator="Lt", value="5")]})
    assert untolerated(gt, taints) is None
    assert untolerated(lt, taints) is not None


def ctr(requests: dict[str, Any] | None = None, **extra: Any) -> dict[str, Any]:
    return {"name": "c", "resources": {"requests": requests or {}}, **extra}


def test_init_containers_count_as_their_peak_not_their_sum() -> None:
    spec = {
        "containers": [ctr({"cpu": "2", "nvidia.com/gpu": 1}), ctr({"cpu": "500m"})],
        "initContainers": [ctr({"cpu": "4", "nvidia.com/gpu": 2}), ctr({"cpu": "3"})],
    }
    assert pod_requests(spec) == {"cpu": 4000, "nvidia.com/gpu": 2}


def test_sidecars_add_to_the_app_and_to_every_later_init_step() -> None:
    spec = {
        "containers": [ctr({"cpu": "1"})],
        "initContainers": [
            ctr({"cpu": "1", "rdma/ib": 1}, restartPolicy="Always"),
            ctr({"cpu": "3"}),  # runs beside the sidecar: 4 CPUs while it runs
        ],
    }
    assert pod_requests(spec) == {"cpu": 4000, "rdma/ib": 1}


def test_limits_stand_in_for_missing_requests_and_overhead_adds() -> None:
    spec = {
        "containers": [
            {"name": "c", "resources": {"limits": {"nvidia.com/gpu": "8", "memory": "1Gi"}}},
            {"name": "d", "resources": {"limits": {"cpu": "2"}, "requests": {"cpu": "250m"}}},
        ],
        "overhead": {"cpu": "100m", "memory": "64Mi"},
    }
    assert pod_requests(spec) == {
        "nvidia.com/gpu": 8,
        "memory": 2**30 + 64 * 2**20,
        "cpu": 350,
    }


def test_pod_level_requests_replace_the_container_sum_for_cpu_and_memory() -> None:
    spec = {
        "containers": [ctr({"cpu": "1", "memory": "1Gi", "nvidia.com/gpu": 1})],
        "resources": {"requests": {"cpu": "6", "memory": "8Gi"}},
    }
    assert pod_requests(spec) == {"cpu": 6000, "memory": 8 * 2**30, "nvidia.com/gpu": 1}


def test_units_round_up_and_unchecked_names_drop() -> None:
    spec = {"containers": [ctr({"cpu": "1.0001", "memory": "1.5", "example": "3"})]}
    assert pod_requests(spec) == {"cpu": 1001, "memory": 2}
