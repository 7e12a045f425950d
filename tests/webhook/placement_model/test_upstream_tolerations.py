"""kube-scheduler's taint and toleration tables, ported onto filters/tolerations.py.

Sources: k8s.io/api core/v1 toleration_test.go and taint_test.go (ToleratesTaint and
compareNumericValues), k8s.io/apimachinery pkg/api/validate/content decimal_int_test.go (the
canonical integer form Gt/Lt tolerations need), k8s.io/component-helpers
scheduling/corev1/helpers_test.go (FindMatchingUntoleratedTaint) and kube-scheduler's
tainttoleration/taint_toleration_test.go (the TaintToleration filter) and
nodeunschedulable/node_unschedulable_test.go (a cordoned node). The Gt/Lt cases are
those upstream runs with the TaintTolerationComparisonOperators gate on: with it off the API
server refuses a Gt/Lt toleration, so no such pod reaches a scheduler.
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.webhook.placement_model.upstream import (
    API,
    APIMACHINERY,
    HELPERS,
    SCHEDULER,
    case,
    fits,
    node,
)
from webhook.placement_model.filters.nodes import NodeView
from webhook.placement_model.filters.tolerations import (
    Taint,
    Toleration,
    canonical_int64,
    parse_taints,
    parse_tolerations,
    untolerated,
)

TOLERATES = f"{API} toleration_test.go TestTolerationToleratesTaint"
NUMERIC = f"{API} toleration_test.go TestCompareNumericValues"
DECIMAL = f"{APIMACHINERY} pkg/api/validate/content/decimal_int_test.go TestIsDecimalInteger"
UNTOLERATED = f"{HELPERS} helpers_test.go TestFindMatchingUntoleratedTaint"
TAINT_TOLERATION = f"{SCHEDULER}/tainttoleration/taint_toleration_test.go"
FILTER = f"{TAINT_TOLERATION} TestTaintTolerationFilter"
GATED = f"{TAINT_TOLERATION} TestTaintTolerationFilterWithFeatureGate"
SLA = "node.kubernetes.io/sla"


def tol(key: str, operator: str = "", value: str = "", effect: str = "") -> Toleration:
    return Toleration(key, operator, value, effect)


def taint(key: str, value: str = "", effect: str = "NoSchedule") -> Taint:
    return Taint(key, value, effect)


TOLERATES_CASES = [
    case(TOLERATES, "same key and effect, Exists, taint has no value",
         tol("foo", "Exists", effect="NoSchedule"), taint("foo"), True),
    case(TOLERATES, "same key and effect, Exists, taint has some value",
         tol("foo", "Exists", effect="NoSchedule"), taint("foo", "bar"), True),
    case(TOLERATES, "same effect, empty key and Exists, means match all taints",
         tol("", "Exists", effect="NoSchedule"), taint("foo", "bar"), True),
    case(TOLERATES, "same key, effect and value, Equal",
         tol("foo", "Equal", "bar", "NoSchedule"), taint("foo", "bar"), True),
    case(TOLERATES, "same key and effect, different values, Equal",
         tol("foo", "Equal", "value1", "NoSchedule"), taint("foo", "value2"), False),
    case(TOLERATES, "same key and value, different effects, Equal",
         tol("foo", "Equal", "bar", "NoSchedule"), taint("foo", "bar", "NoExecute"), False),
    case(TOLERATES, "Gt - taint value less than toleration value",
         tol(SLA, "Gt", "950", "NoSchedule"), taint(SLA, "800"), False),
    case(TOLERATES, "Gt - taint value greater than toleration value",
         tol(SLA, "Gt", "750", "NoSchedule"), taint(SLA, "950"), True),
    case(TOLERATES, "Lt - taint value greater than toleration value",
         tol(SLA, "Lt", "800", "NoSchedule"), taint(SLA, "950"), False),
    case(TOLERATES, "Lt - taint value less than toleration value",
         tol(SLA, "Lt", "950", "NoSchedule"), taint(SLA, "800"), True),
    case(TOLERATES, "Gt and taint with equal numeric value",
         tol(SLA, "Gt", "950", "NoSchedule"), taint(SLA, "950"), False),
    case(TOLERATES, "Gt and taint with non-numeric value",
         tol(SLA, "Gt", "950", "NoSchedule"), taint(SLA, "high"), False),
    case(TOLERATES, "Gt and negative numeric values - taint value less than threshold",
         tol("test-key", "Gt", "-100", "NoSchedule"), taint("test-key", "-200"), False),
    case(TOLERATES, "Gt and large int64 values - taint value less than threshold",
         tol("test-key", "Gt", "9223372036854775806", "NoSchedule"), taint("test-key", "100"),
         False),
]  # fmt: skip


@pytest.mark.parametrize(("toleration", "the_taint", "want"), TOLERATES_CASES)
def test_toleration_tolerates_taint(toleration: Toleration, the_taint: Taint, want: bool) -> None:
    assert toleration.tolerates(the_taint) is want


NUMERIC_CASES = [
    case(NUMERIC, "Gt - taint value greater than toleration value", "100", "200", "Gt", True),
    case(NUMERIC, "Gt - taint value less than toleration value", "200", "100", "Gt", False),
    case(NUMERIC, "Gt - taint value equal to toleration value", "100", "100", "Gt", False),
    case(NUMERIC, "Gt - negative numbers, taint greater", "-100", "-50", "Gt", True),
    case(NUMERIC, "Gt - negative numbers, taint less", "-50", "-100", "Gt", False),
    case(NUMERIC, "Gt - zero and positive", "0", "1", "Gt", True),
    case(NUMERIC, "Gt - large int64 values, taint greater",
         "9223372036854775806", "9223372036854775807", "Gt", True),
    case(NUMERIC, "Lt - taint value less than toleration value", "200", "100", "Lt", True),
    case(NUMERIC, "Lt - taint value greater than toleration value", "100", "200", "Lt", False),
    case(NUMERIC, "Lt - taint value equal to toleration value", "100", "100", "Lt", False),
    case(NUMERIC, "Lt - negative numbers, taint less", "-50", "-100", "Lt", True),
    case(NUMERIC, "Lt - negative numbers, taint greater", "-100", "-50", "Lt", False),
    case(NUMERIC, "Lt - zero and negative", "0", "-1", "Lt", True),
    case(NUMERIC, "Gt - invalid toleration value (non-numeric)", "abc", "100", "Gt", False),
    case(NUMERIC, "Gt - invalid toleration value (empty string)", "", "100", "Gt", False),
    case(NUMERIC, "Gt - invalid toleration value (leading zero)", "0100", "200", "Gt", False),
    case(NUMERIC, "Gt - invalid toleration value (plus sign)", "+100", "200", "Gt", False),
    case(NUMERIC, "Gt - invalid toleration value (floating point)", "100.5", "200", "Gt", False),
    case(NUMERIC, "Gt - invalid toleration value (just minus sign)", "-", "100", "Gt", False),
    case(NUMERIC, "Gt - invalid taint value (non-numeric)", "100", "xyz", "Gt", False),
    case(NUMERIC, "Gt - invalid taint value (empty string)", "100", "", "Gt", False),
    case(NUMERIC, "Gt - invalid taint value (leading zero)", "100", "0200", "Gt", False),
    case(NUMERIC, "Lt - invalid taint value (plus sign)", "100", "+200", "Lt", False),
    case(NUMERIC, "Lt - invalid taint value (spaces)", "100", " 200 ", "Lt", False),
    case(NUMERIC, "Gt - both zero", "0", "0", "Gt", False),
    case(NUMERIC, "Lt - both zero", "0", "0", "Lt", False),
    case(NUMERIC, "Gt - max int64 as taint", "0", "9223372036854775807", "Gt", True),
    case(NUMERIC, "Lt - min int64 as taint", "0", "-9223372036854775808", "Lt", True),
]  # fmt: skip


@pytest.mark.parametrize(("toleration", "taint_value", "op", "want"), NUMERIC_CASES)
def test_compare_numeric_values(toleration: str, taint_value: str, op: str, want: bool) -> None:
    """Through a toleration and a taint of one key and effect, so only the values decide."""
    assert tol(SLA, op, toleration, "NoSchedule").tolerates(taint(SLA, taint_value)) is want


CANONICAL = ["0", "1", "5", "9", "-5", "-1", "-9", "100", "234", "999", "123", "-456", "-100",
             "-987", "9223372036854775807", "-9223372036854775808", "999999999999"]  # fmt: skip
NOT_CANONICAL = [
    "-0", "00", "000", "0000000", "01", "02", "09", "0123", "0700", "0950", "00123", "-01",
    "-0123", "-00", "+123", "+5", "+0", "", "-", "+", " ", "   ", " 123", "123 ", "12 3",
    " 123 ", "12.3", "0.0", "-12.5", "123.", ".123", "abc", "12a3", "a123", "123a", "ABC",
    "12A3", "0x123", "0X123", "0o777", "0b101", "1e5", "1e-5", "1E5", "1_000", "1,000",
    "1.000", "1'000", "--123", "++123", "+-123", "-+123", "123-", "12-3", "123+", "12+3",
    "\t123", "123\t", "123\n", "123\r", "123\x00", "123\v", "123\f", "(123)", "[123]",
    "{123}", "$123", "123%", "#123", "@123", "&123", "*123", "12/3", "12\\3", "12|3", "12;3",
    "12:3", "12?3", "12!3", "~123", "`123", "'123'", '"123"', "\u2212123", "１２３", "١٢٣",
    "一二三", "123⁴", "123₄",
]  # fmt: skip


@pytest.mark.parametrize("text", CANONICAL, ids=lambda t: f"{DECIMAL} :: valid {t!r}")
def test_canonical_decimal_integers_are_compared(text: str) -> None:
    assert canonical_int64(text) == int(text)


@pytest.mark.parametrize("text", NOT_CANONICAL, ids=lambda t: f"{DECIMAL} :: invalid {t!r}")
def test_other_spellings_tolerate_nothing(text: str) -> None:
    assert canonical_int64(text) is None
    assert not tol(SLA, "Gt", "-9223372036854775808").tolerates(taint(SLA, text))
    assert not tol(SLA, "Lt", text).tolerates(taint(SLA, "-9223372036854775808"))


def test_beyond_int64_is_canonical_but_not_an_int64() -> None:
    """DECIMAL "very long valid number": the form passes, strconv.ParseInt then refuses it."""
    assert canonical_int64("12345678901234567890") is None


UNTOLERATED_CASES = [
    case(UNTOLERATED, "empty tolerations tolerate empty taints", [], [], True),
    case(UNTOLERATED, "non-empty tolerations tolerate empty taints",
         [tol("foo", "Exists", effect="NoSchedule")], [], True),
    case(UNTOLERATED, "tolerations match all taints, expect tolerated",
         [tol("foo", "Exists", effect="NoSchedule")], [taint("foo")], True),
    case(UNTOLERATED, "no filterFunc indicated, means all taints apply to the filter, "
         "tolerations don't match taints, expect untolerated",
         [tol("foo", "Exists", effect="NoSchedule")], [taint("bar")], False),
    case(UNTOLERATED, "numeric Gt operator with taint value below threshold",
         [tol(SLA, "Gt", "950", "NoSchedule")], [taint(SLA, "800")], False),
    case(UNTOLERATED, "numeric Gt operator with taint value above threshold",
         [tol(SLA, "Gt", "750", "NoSchedule")], [taint(SLA, "950")], True),
    case(UNTOLERATED, "numeric Lt operator with taint value above threshold",
         [tol(SLA, "Lt", "800", "NoSchedule")], [taint(SLA, "950")], False),
    case(UNTOLERATED, "numeric Gt operator with non-numeric taint value",
         [tol(SLA, "Gt", "950", "NoSchedule")], [taint(SLA, "high")], False),
]  # fmt: skip


@pytest.mark.parametrize(("tolerations", "taints", "want"), UNTOLERATED_CASES)
def test_find_matching_untolerated_taint(
    tolerations: list[Toleration], taints: list[Taint], want: bool
) -> None:
    assert (untolerated(tolerations, taints) is None) is want


def test_untolerated_taints_that_the_filter_leaves_out_do_not_count() -> None:
    """UNTOLERATED "tolerations don't match taints, but no taints apply to the filter" and
    "tolerations match taints, expect tolerated" (the filter there keeps NoExecute only)."""
    assert untolerated([tol("foo", "Exists", effect="NoSchedule")], []) is None
    node_taints = [taint("foo", effect="NoExecute"), taint("bar")]
    no_execute = [t for t in node_taints if t.effect == "NoExecute"]
    assert untolerated([tol("foo", "Exists", effect="NoExecute")], no_execute) is None


def raw_tol(key: str, operator: str = "", value: str = "", effect: str = "") -> dict[str, str]:
    found = {"key": key, "operator": operator, "value": value, "effect": effect}
    return {k: v for k, v in found.items() if v}


def raw_taint(key: str, value: str, effect: str) -> dict[str, str]:
    return {"key": key, "value": value, "effect": effect}


DEDICATED_1 = raw_taint("dedicated", "user1", "NoSchedule")
PRIORITY = "node.example.com/priority-level"

FILTER_CASES = [
    case(FILTER, "A pod having no tolerations can't be scheduled onto a node with nonempty taints",
         [], [DEDICATED_1], False),
    case(FILTER, "A pod which can be scheduled on a dedicated node assigned to user1 with effect "
         "NoSchedule", [raw_tol("dedicated", "", "user1", "NoSchedule")], [DEDICATED_1], True),
    case(FILTER, "A pod which can't be scheduled on a dedicated node assigned to user2 with "
         "effect NoSchedule", [raw_tol("dedicated", "Equal", "user2", "NoSchedule")],
         [DEDICATED_1], False),
    case(FILTER, "A pod can be scheduled onto the node, with a toleration uses operator Exists "
         "that tolerates the taints on the node", [raw_tol("foo", "Exists", "", "NoSchedule")],
         [raw_taint("foo", "bar", "NoSchedule")], True),
    case(FILTER, "A pod has multiple tolerations, node has multiple taints, all the taints are "
         "tolerated, pod can be scheduled onto the node",
         [raw_tol("dedicated", "Equal", "user2", "NoSchedule"),
          raw_tol("foo", "Exists", "", "NoSchedule")],
         [raw_taint("dedicated", "user2", "NoSchedule"), raw_taint("foo", "bar", "NoSchedule")],
         True),
    case(FILTER, "A pod has a toleration that keys and values match the taint on the node, but "
         "(non-empty) effect doesn't match, can't be scheduled onto the node",
         [raw_tol("foo", "Equal", "bar", "PreferNoSchedule")],
         [raw_taint("foo", "bar", "NoSchedule")], False),
    case(FILTER, "The pod has a toleration that keys and values match the taint on the node, the "
         "effect of toleration is empty, and the effect of taint is NoSchedule. Pod can be "
         "scheduled onto the node", [raw_tol("foo", "Equal", "bar")],
         [raw_taint("foo", "bar", "NoSchedule")], True),
    case(FILTER, "The pod has a toleration that key and value don't match the taint on the node, "
         "but the effect of taint on node is PreferNoSchedule. Pod can be scheduled onto the node",
         [raw_tol("dedicated", "Equal", "user2", "NoSchedule")],
         [raw_taint("dedicated", "user1", "PreferNoSchedule")], True),
    case(FILTER, "The pod has no toleration, but the effect of taint on node is PreferNoSchedule. "
         "Pod can be scheduled onto the node", [],
         [raw_taint("dedicated", "user1", "PreferNoSchedule")], True),
    case(FILTER, "Pod with Gt toleration cannot be scheduled on node when taint value is lower "
         "than threshold", [raw_tol(PRIORITY, "Gt", "950", "NoSchedule")],
         [raw_taint(PRIORITY, "800", "NoSchedule")], False),
    case(FILTER, "Pod with Gt toleration can be scheduled on node when taint value is higher "
         "than threshold", [raw_tol(SLA, "Gt", "750", "NoSchedule")],
         [raw_taint(SLA, "950", "NoSchedule")], True),
    case(FILTER, "Pod with Lt toleration cannot be scheduled on node when taint value is higher "
         "than threshold", [raw_tol(PRIORITY, "Lt", "800", "NoSchedule")],
         [raw_taint(PRIORITY, "950", "NoSchedule")], False),
    case(FILTER, "Pod with Lt toleration can be scheduled on node when taint value is lower than "
         "threshold", [raw_tol(SLA, "Lt", "950", "NoSchedule")],
         [raw_taint(SLA, "800", "NoSchedule")], True),
    case(FILTER, "Pod with Gt toleration cannot be scheduled on node with non-numeric taint value",
         [raw_tol(SLA, "Gt", "950", "NoSchedule")], [raw_taint(SLA, "high", "NoSchedule")], False),
    case(GATED, "Pod with Gt toleration can be scheduled when feature gate is enabled and taint "
         "value is higher", [raw_tol(SLA, "Gt", "750", "NoSchedule")],
         [raw_taint(SLA, "950", "NoSchedule")], True),
    case(GATED, "Pod with Lt toleration can be scheduled when feature gate is enabled and taint "
         "value is lower", [raw_tol(SLA, "Lt", "950", "NoSchedule")],
         [raw_taint(SLA, "800", "NoSchedule")], True),
    # The issue's own cases, on a real node: what kube-scheduler refuses, explain refuses.
    case(NUMERIC, "Gt - invalid toleration value (leading zero), on a node",
         [raw_tol(SLA, "Gt", "0100", "NoSchedule")], [raw_taint(SLA, "200", "NoSchedule")], False),
    case(NUMERIC, "Gt - invalid toleration value (plus sign), on a node",
         [raw_tol(SLA, "Gt", "+100", "NoSchedule")], [raw_taint(SLA, "200", "NoSchedule")], False),
    case(NUMERIC, "Gt - invalid taint value (leading zero), on a node",
         [raw_tol(SLA, "Gt", "100", "NoSchedule")], [raw_taint(SLA, "0200", "NoSchedule")], False),
]  # fmt: skip


@pytest.mark.parametrize(("tolerations", "taints", "want"), FILTER_CASES)
def test_taint_toleration_filter(
    tolerations: list[dict[str, str]], taints: list[dict[str, Any]], want: bool
) -> None:
    spec = {"tolerations": tolerations}
    assert (untolerated(parse_tolerations(spec), parse_taints({"taints": taints})) is None) is want
    assert fits(spec, node("nodeA", taints=taints)) is want


@pytest.mark.parametrize(
    ("the_taint", "text"),
    [case(f"{API} taint_test.go TestTaintToString", "key, value and effect",
          taint("foo", "bar"), "foo=bar:NoSchedule"),
     case(f"{API} taint_test.go TestTaintToString", "key and effect",
          taint("foo"), "foo:NoSchedule")],
)  # fmt: skip
def test_taint_to_string(the_taint: Taint, text: str) -> None:
    """explain names an untolerated taint as kubectl and the scheduler's events do."""
    assert str(the_taint) == text


UNSCHEDULABLE = f"{SCHEDULER}/nodeunschedulable/node_unschedulable_test.go TestNodeUnschedulable"


@pytest.mark.parametrize(
    ("tolerations", "cordoned", "want"),
    [case(UNSCHEDULABLE, "Does not schedule pod to unschedulable node "
          "(node.Spec.Unschedulable==true)", [], True, False),
     case(UNSCHEDULABLE, "Schedule pod to normal node", [], False, True),
     case(UNSCHEDULABLE, "Schedule pod with toleration to unschedulable node "
          "(node.Spec.Unschedulable==true)",
          [raw_tol("node.kubernetes.io/unschedulable", effect="NoSchedule")], True, True)],
)  # fmt: skip
def test_node_unschedulable(tolerations: list[dict[str, str]], cordoned: bool, want: bool) -> None:
    doc = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n"},
           "spec": {"unschedulable": cordoned}}  # fmt: skip
    assert fits({"tolerations": tolerations}, NodeView.from_object(doc)) is want
