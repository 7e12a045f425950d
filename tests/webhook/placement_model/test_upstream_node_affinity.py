"""kube-scheduler's node-selector and node-affinity tables, ported onto filters/selectors.py.

Sources: k8s.io/component-helpers scheduling/corev1/nodeaffinity/nodeaffinity_test.go and
scheduling/corev1/helpers_test.go (the NodeAffinity filter's matching), the validation
k8s.io/apimachinery pkg/labels NewRequirement applies to every matchExpressions entry, and
kube-scheduler's nodename/node_name_test.go (spec.nodeName).
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.webhook.placement_model.upstream import APIMACHINERY, HELPERS, case, fits, node, plan
from webhook.nodefit.node_verdict import evaluate
from webhook.placement_model.filters.selectors import (
    parse_preferred,
    parse_required,
    parse_requirement,
    requirement_matches,
    term_matches,
)

AFFINITY = f"{HELPERS} nodeaffinity_test.go TestPodMatchesNodeSelectorAndAffinityTerms"
TERMS = f"{HELPERS} helpers_test.go TestMatchNodeSelectorTerms"
SELECTOR = f"{HELPERS} nodeaffinity_test.go TestNodeSelectorMatch"
PREFERRED = f"{HELPERS} nodeaffinity_test.go TestPreferredSchedulingTermsScore"
AS_SELECTOR = f"{HELPERS} nodeaffinity_test.go TestNodeSelectorRequirementsAsSelector"
CONSTRUCTOR = f"{APIMACHINERY} pkg/labels/selector_test.go TestRequirementConstructor"


def expr(key: str, operator: str, *values: str) -> dict[str, Any]:
    found: dict[str, Any] = {"key": key, "operator": operator}
    if values:
        found["values"] = list(values)
    return found


def name_is(*values: str, operator: str = "In") -> dict[str, Any]:
    return {"key": "metadata.name", "operator": operator, "values": list(values)}


def required(*terms: dict[str, Any]) -> dict[str, Any]:
    return {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": list(terms)}}}  # fmt: skip


def labels_term(*exprs: dict[str, Any]) -> dict[str, Any]:
    return {"matchExpressions": list(exprs)}


FOO_BAR = {"foo": "bar"}
GPU = {"GPU": "NVIDIA-GRID-K1"}

POD_CASES = [
    case(AFFINITY, "no selector", {}, {}, "node", True),
    case(AFFINITY, "missing labels", {"nodeSelector": FOO_BAR}, {}, "node", False),
    case(AFFINITY, "same labels", {"nodeSelector": FOO_BAR}, FOO_BAR, "node", True),
    case(AFFINITY, "node labels are superset",
         {"nodeSelector": FOO_BAR}, {"foo": "bar", "baz": "blah"}, "node", True),
    case(AFFINITY, "node labels are subset",
         {"nodeSelector": {"foo": "bar", "baz": "blah"}}, FOO_BAR, "node", False),
    case(AFFINITY, "Pod with matchExpressions using In operator that matches the existing node",
         {"affinity": required(labels_term(expr("foo", "In", "bar", "value2")))},
         FOO_BAR, "node", True),
    # Node-affinity Gt/Lt read leading zeros (strconv.ParseInt): 0206 > 0204.
    case(AFFINITY, "Pod with matchExpressions using Gt operator that matches the existing node",
         {"affinity": required(labels_term(expr("kernel-version", "Gt", "0204")))},
         {"kernel-version": "0206"}, "node", True),
    case(AFFINITY, "Pod with matchExpressions using NotIn operator that matches the existing node",
         {"affinity": required(labels_term(expr("mem-type", "NotIn", "DDR", "DDR2")))},
         {"mem-type": "DDR3"}, "node", True),
    case(AFFINITY, "Pod with matchExpressions using Exists operator that matches the existing node",
         {"affinity": required(labels_term(expr("GPU", "Exists")))}, GPU, "node", True),
    case(AFFINITY, "Pod with affinity that don't match node's labels won't schedule onto the node",
         {"affinity": required(labels_term(expr("foo", "In", "value1", "value2")))},
         FOO_BAR, "node", False),
    case(AFFINITY, "Pod with a nil []NodeSelectorTerm in affinity, can't match the node's labels "
         "and won't schedule onto the node",
         {"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
             "nodeSelectorTerms": None}}}}, FOO_BAR, "node", False),
    case(AFFINITY, "Pod with an empty []NodeSelectorTerm in affinity, can't match the node's "
         "labels and won't schedule onto the node",
         {"affinity": required()}, FOO_BAR, "node", False),
    case(AFFINITY, "Pod with empty MatchExpressions is not a valid value will match no objects "
         "and won't schedule onto the node",
         {"affinity": required(labels_term())}, FOO_BAR, "node", False),
    case(AFFINITY, "Pod with no Affinity will schedule onto a node", {}, FOO_BAR, "node", True),
    case(AFFINITY, "Pod with Affinity but nil NodeSelector will schedule onto a node",
         {"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": None}}},
         FOO_BAR, "node", True),
    case(AFFINITY, "Pod with multiple matchExpressions ANDed that matches the existing node",
         {"affinity": required(labels_term(
             expr("GPU", "Exists"), expr("GPU", "NotIn", "AMD", "INTER")))},
         GPU, "node", True),
    case(AFFINITY, "Pod with multiple matchExpressions ANDed that doesn't match the existing node",
         {"affinity": required(labels_term(
             expr("GPU", "Exists"), expr("GPU", "In", "AMD", "INTER")))},
         GPU, "node", False),
    case(AFFINITY, "Pod with multiple NodeSelectorTerms ORed in affinity, matches the node's "
         "labels and will schedule onto the node",
         {"affinity": required(labels_term(expr("foo", "In", "bar", "value2")),
                               labels_term(expr("diffkey", "In", "wrong", "value2")))},
         FOO_BAR, "node", True),
    case(AFFINITY, "Pod with an Affinity and a PodSpec.NodeSelector(the old thing that we are "
         "deprecating) both are satisfied, will schedule onto the node",
         {"nodeSelector": FOO_BAR, "affinity": required(labels_term(expr("foo", "Exists")))},
         FOO_BAR, "node", True),
    case(AFFINITY, "Pod with an Affinity matches node's labels but the PodSpec.NodeSelector(the "
         "old thing that we are deprecating) is not satisfied, won't schedule onto the node",
         {"nodeSelector": FOO_BAR, "affinity": required(labels_term(expr("foo", "Exists")))},
         {"foo": "barrrrrr"}, "node", False),
    # An invalid label value makes the term match nothing, even for NotIn.
    case(AFFINITY, "Pod with an invalid value in Affinity term won't be scheduled onto the node",
         {"affinity": required(labels_term(expr("foo", "NotIn", "invalid value: ___@#$%^")))},
         FOO_BAR, "node", False),
    case(AFFINITY, "Pod with matchFields using In operator that matches the existing node",
         {"affinity": required({"matchFields": [name_is("node_1")]})}, {}, "node_1", True),
    case(AFFINITY, "Pod with matchFields using In operator that does not match the existing node",
         {"affinity": required({"matchFields": [name_is("node_1")]})}, {}, "node_2", False),
    case(AFFINITY, "Pod with two terms: matchFields does not match, but matchExpressions matches",
         {"affinity": required({"matchFields": [name_is("node_1")]},
                               labels_term(expr("foo", "In", "bar")))},
         FOO_BAR, "node_2", True),
    case(AFFINITY, "Pod with one term: matchFields does not match, but matchExpressions matches",
         {"affinity": required({"matchFields": [name_is("node_1")],
                                "matchExpressions": [expr("foo", "In", "bar")]})},
         FOO_BAR, "node_2", False),
    case(AFFINITY, "Pod with one term: both matchFields and matchExpressions match",
         {"affinity": required({"matchFields": [name_is("node_1")],
                                "matchExpressions": [expr("foo", "In", "bar")]})},
         FOO_BAR, "node_1", True),
    case(AFFINITY, "Pod with two terms: both matchFields and matchExpressions do not match",
         {"affinity": required({"matchFields": [name_is("node_1")]},
                               labels_term(expr("foo", "In", "not-match-to-bar")))},
         FOO_BAR, "node_2", False),
]  # fmt: skip


@pytest.mark.parametrize(("spec", "labels", "name", "want"), POD_CASES)
def test_pod_matches_node_selector_and_affinity_terms(
    spec: dict[str, Any], labels: dict[str, str], name: str, want: bool
) -> None:
    assert fits(spec, node(name, labels)) is want


L1 = {"label_1": "label_1_val"}
L1_TERM = labels_term(expr("label_1", "In", "label_1_val"))
BOTH_TERM = {"matchExpressions": [expr("label_1", "In", "label_1_val")],
             "matchFields": [name_is("host_1")]}  # fmt: skip

TERM_CASES = [
    case(TERMS, "node label matches matchExpressions terms", [L1_TERM], "n", L1, True),
    case(TERMS, "node field matches matchFields terms",
         [{"matchFields": [name_is("host_1")]}], "host_1", {}, True),
    case(TERMS, "invalid node field requirement",
         [{"matchFields": [name_is("host_1", "host_2")]}], "host_1", {}, False),
    case(TERMS, "fieldSelectorTerm with node labels",
         [{"matchFields": [name_is("host_1")]}], "not_host_1", {"metadata.name": "host_1"}, False),
    case(TERMS, "labelSelectorTerm with node fields",
         [labels_term(expr("metadata.name", "In", "host_1"))], "host_1", {}, False),
    case(TERMS, "labelSelectorTerm and fieldSelectorTerm was set, but only node fields",
         [BOTH_TERM], "host_1", {}, False),
    case(TERMS, "labelSelectorTerm and fieldSelectorTerm was set, both node fields and labels "
         "(both matched)", [BOTH_TERM], "host_1", L1, True),
    case(TERMS, "labelSelectorTerm and fieldSelectorTerm was set, both node fields and labels "
         "(one mismatched)", [BOTH_TERM], "host_1", {"label_1": "label_1_val-failed"}, False),
    case(TERMS, "multi-selector was set, both node fields and labels (one mismatched)",
         [L1_TERM, {"matchFields": [name_is("host_1")]}], "host_1",
         {"label_1": "label_1_val-failed"}, True),
    case(SELECTOR, "node matches field selector, but not labels", [BOTH_TERM], "host_1", {}, False),
    case(SELECTOR, "node matches field selector and label selector",
         [BOTH_TERM], "host_1", L1, True),
    case(SELECTOR, "second term matches",
         [L1_TERM, {"matchFields": [name_is("host_1")]}], "host_1", {}, True),
]  # fmt: skip


@pytest.mark.parametrize(("terms", "name", "labels", "want"), TERM_CASES)
def test_match_node_selector_terms(
    terms: list[dict[str, Any]], name: str, labels: dict[str, str], want: bool
) -> None:
    parsed = parse_required({"affinity": required(*terms)})
    assert parsed is not None
    assert any(term_matches(t, labels, name) for t in parsed) is want
    assert fits({"affinity": required(*terms)}, node(name, labels)) is want


def test_node_selector_match_skips_invalid_terms_and_keeps_the_valid_one() -> None:
    """SELECTOR "invalid field selector and label selector": terms 0 (matchFields with two
    values) and 2 (key "invalid key") are parse errors; the scheduler's lazy selector skips
    them and still matches term 1."""
    terms = parse_required({"affinity": required(
        {"matchFields": [name_is("host_1", "host_2")]},
        BOTH_TERM,
        labels_term(expr("invalid key", "In", "label_value")),
    )})  # fmt: skip
    assert terms is not None
    assert [t.valid for t in terms] == [False, True, False]
    assert [term_matches(t, L1, "host_1") for t in terms] == [False, True, False]


PREFERRED_CASES = [
    case(PREFERRED, "invalid field selector but no weight, error not reported",
         [{"weight": 0, "preference": {"matchFields": [name_is("host_1", "host_2")]}}], {}, 0),
    case(PREFERRED, "first and third term match",
         [{"weight": 5, "preference": {"matchFields": [name_is("host_1")]}},
          {"weight": 7, "preference": labels_term(
              expr("unknown_label", "In", "unknown_label_val"))},
          {"weight": 11, "preference": L1_TERM}], L1, 16),
]  # fmt: skip


@pytest.mark.parametrize(("preferred", "labels", "score"), PREFERRED_CASES)
def test_preferred_scheduling_terms_score(
    preferred: list[dict[str, Any]], labels: dict[str, str], score: int
) -> None:
    spec = {"affinity": {"nodeAffinity": {
        "preferredDuringSchedulingIgnoredDuringExecution": preferred}}}  # fmt: skip
    counted = parse_preferred(spec)
    assert sum(p.weight for p in counted if term_matches(p.term, labels, "host_1")) == score
    assert evaluate(plan(spec), node("host_1", labels)).score == score  # explain's score


REQUIREMENT_CASES = [
    case(AS_SELECTOR, "foo in (baz,bar)", expr("foo", "In", "bar", "baz"), True),
    case(AS_SELECTOR, "Exists with values", expr("foo", "Exists", "bar", "baz"), False),
    case(AS_SELECTOR, "foo>1", expr("foo", "Gt", "1"), True),
    case(AS_SELECTOR, "bar<7", expr("bar", "Lt", "7"), True),
    case(AS_SELECTOR, "operator invalid", expr("baz", "invalid", "5"), False),
    # labels.NewRequirement's own table; node affinity has no Equals, so x16 and x17 ask
    # their values with In (the value check is the same for every operator).
    case(CONSTRUCTOR, "x1 In without values", expr("x1", "In"), False),
    case(CONSTRUCTOR, "x2 NotIn without values", expr("x2", "NotIn"), False),
    case(CONSTRUCTOR, "x3 In foo", expr("x3", "In", "foo"), True),
    case(CONSTRUCTOR, "x4 NotIn foo", expr("x4", "NotIn", "foo"), True),
    case(CONSTRUCTOR, "x6 Exists", expr("x6", "Exists"), True),
    case(CONSTRUCTOR, "x7 DoesNotExist", expr("x7", "DoesNotExist"), True),
    case(CONSTRUCTOR, "x8 Exists with a value", expr("x8", "Exists", "foo"), False),
    case(CONSTRUCTOR, "x11 Gt 1", expr("x11", "Gt", "1"), True),
    case(CONSTRUCTOR, "x12 Lt 6", expr("x12", "Lt", "6"), True),
    case(CONSTRUCTOR, "x13 Gt without a value", expr("x13", "Gt"), False),
    case(CONSTRUCTOR, "x14 Gt bar", expr("x14", "Gt", "bar"), False),
    case(CONSTRUCTOR, "x15 Lt bar", expr("x15", "Lt", "bar"), False),
    case(CONSTRUCTOR, "key of 254 characters", expr("a" * 254, "Exists"), False),
    case(CONSTRUCTOR, "x16 value of 254 characters", expr("x16", "In", "a" * 254), False),
    case(CONSTRUCTOR, "x17 value 'a b'", expr("x17", "In", "a b"), False),
    case(CONSTRUCTOR, "x18 unsupportedOp", expr("x18", "unsupportedOp"), False),
]  # fmt: skip


@pytest.mark.parametrize(("raw", "valid"), REQUIREMENT_CASES)
def test_node_selector_requirements_as_selector(raw: dict[str, Any], valid: bool) -> None:
    assert (parse_requirement(raw).error is None) is valid


# The Gt/Lt operand goes through strconv.ParseInt *and* the label-value check: leading
# zeros pass both, a sign fails the second (so `+1` and `-1` make the term match nothing).
GT_OPERANDS = [("1", 1), ("0204", 204), ("007", 7), ("9223372036854775807", 2**63 - 1),
               ("+1", None), ("-1", None), ("9223372036854775808", None), ("1.5", None),
               ("", None), (" 1", None)]  # fmt: skip


@pytest.mark.parametrize(("operand", "number"), GT_OPERANDS)
def test_gt_operand_is_a_parse_int_that_is_also_a_label_value(
    operand: str, number: int | None
) -> None:
    req = parse_requirement(expr("n", "Gt", operand))
    assert (req.error is None) is (number is not None)
    if number is not None and number < 2**63 - 1:
        assert requirement_matches(req, {"n": str(number + 1)})
    if number is not None:
        assert not requirement_matches(req, {"n": str(number)})


NODE_NAME = "kubernetes/kubernetes pkg/scheduler/framework/plugins/nodename/node_name_test.go"


@pytest.mark.parametrize(
    ("spec", "name", "want"),
    [case(f"{NODE_NAME} TestNodeName", "no host specified", {}, "foo", True),
     case(f"{NODE_NAME} TestNodeName", "host matches", {"nodeName": "foo"}, "foo", True),
     case(f"{NODE_NAME} TestNodeName", "host doesn't match", {"nodeName": "bar"}, "foo", False)],
)  # fmt: skip
def test_node_name(spec: dict[str, Any], name: str, want: bool) -> None:
    assert fits(spec, node(name)) is want
