"""The minimal form of required node affinity matches exactly the nodes the raw terms match
(issue 44): over random terms and label sets, and over the witness values that tell every
region apart; and it is smaller where the issue found waste."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from webhook.placement_model.filters.minimal import minimal_terms
from webhook.placement_model.filters.selectors import parse_required, term_matches

KEYS = ["a", "b", "c"]
VALUES = ["0", "1", "2", "3", "+2", "02", "x", "y", "-1"]


def matches(terms: list[dict[str, Any]], labels: dict[str, str], name: str = "n1") -> bool:
    required = {"nodeSelectorTerms": terms}
    spec = {
        "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": required}}
    }
    return any(term_matches(t, labels, name) for t in parse_required(spec) or ())


@st.composite
def expression(draw: st.DrawFn) -> dict[str, Any]:
    key = draw(st.sampled_from(KEYS))
    op = draw(st.sampled_from(["In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt"]))
    if op in ("In", "NotIn"):
        values = draw(st.lists(st.sampled_from(VALUES), min_size=1, max_size=3))
        return {"key": key, "operator": op, "values": values}
    if op in ("Gt", "Lt"):
        number = draw(st.sampled_from(["-1", "0", "1", "2", "3"]))
        return {"key": key, "operator": op, "values": [number]}
    return {"key": key, "operator": op}


@st.composite
def term(draw: st.DrawFn) -> dict[str, Any]:
    out: dict[str, Any] = {"matchExpressions": draw(st.lists(expression(), max_size=4))}
    if draw(st.integers(0, 5)) == 0:
        out["matchFields"] = [{"key": "metadata.name", "operator": draw(
            st.sampled_from(["In", "NotIn"])), "values": ["n1"]}]  # fmt: skip
    return out


labels = st.dictionaries(st.sampled_from(KEYS), st.sampled_from([*VALUES, "4", "007", "z"]))
terms = st.lists(term(), min_size=1, max_size=5)


@settings(max_examples=400, deadline=None)
@given(terms, st.lists(labels, min_size=1, max_size=20), st.sampled_from(["n1", "n2"]))
def test_same_nodes_as_the_raw_terms(raw: list[dict[str, Any]], nodes: list[dict[str, str]],
                                     name: str) -> None:  # fmt: skip
    small = minimal_terms(raw)
    assert small, "at least one term is always kept"
    for node in nodes:
        assert matches(small, node, name) == matches(raw, node, name), (raw, small, node)


@settings(max_examples=300, deadline=None)
@given(terms)
def test_never_larger_and_idempotent(raw: list[dict[str, Any]]) -> None:
    small = minimal_terms(raw)
    assert len(small) <= len(raw)
    count = sum(len(t.get("matchExpressions") or []) for t in small)
    assert count <= sum(len(t.get("matchExpressions") or []) for t in raw) or len(small) == 1
    assert minimal_terms(small) == small


def gt(key: str, n: int) -> dict[str, Any]:
    return {"key": key, "operator": "Gt", "values": [str(n)]}


def lt(key: str, n: int) -> dict[str, Any]:
    return {"key": key, "operator": "Lt", "values": [str(n)]}


def test_an_empty_band_is_dropped() -> None:
    """Issue 44: `max-gpus-per-numa-node Gt 1` and `Lt 2` in one term match no node."""
    dead = {"matchExpressions": [gt("g", 1), lt("g", 2)]}
    live = {"matchExpressions": [gt("g", 0)]}
    assert minimal_terms([dead, live]) == [live]


def test_an_implied_bound_and_exists_go() -> None:
    """`Gt 128` beside `Gt 127`, and a shape's `Exists` beside its own `Lt`."""
    raw = {"matchExpressions": [gt("m", 127), {"key": "g", "operator": "Exists"}, gt("m", 128),
                                lt("g", 3)]}  # fmt: skip
    assert minimal_terms([raw]) == [{"matchExpressions": [gt("m", 128), lt("g", 3)]}]


def test_terms_alike_but_for_one_in_set_merge() -> None:
    """Terms 1 and 2 of the issue's Deployment differ only in the scope's In set."""
    one = {"matchExpressions": [gt("g", 0), {"key": "s", "operator": "In", "values": ["pod"]}]}
    two = {"matchExpressions": [gt("g", 0), {"key": "s", "operator": "In",
                                             "values": ["container"]}]}  # fmt: skip
    assert minimal_terms([one, two]) == [
        {
            "matchExpressions": [
                gt("g", 0),
                {"key": "s", "operator": "In", "values": ["pod", "container"]},
            ]
        }
    ]


def test_a_term_inside_another_goes() -> None:
    wide = {"matchExpressions": [gt("g", 0)]}
    narrow = {"matchExpressions": [gt("g", 3), {"key": "p", "operator": "In", "values": ["x"]}]}
    assert minimal_terms([narrow, wide]) == [wide]


def test_all_dead_stay_as_written() -> None:
    """A pod no node can match shows its contradiction as written."""
    raw = [{"matchExpressions": [gt("g", 5), lt("g", 3)]},
           {"matchExpressions": [{"key": "z", "operator": "In", "values": ["a"]},
                                 {"key": "z", "operator": "In", "values": ["0"]}]}]  # fmt: skip
    assert minimal_terms(raw) == raw


def test_beyond_the_bounds_terms_come_back_unchanged() -> None:
    many = [{"matchExpressions": [{"key": "k", "operator": "In", "values": [str(i)]}]}
            for i in range(100)]  # fmt: skip
    assert minimal_terms(many) == many
