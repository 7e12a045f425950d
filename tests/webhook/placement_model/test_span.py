"""A workload's span: the domains its pods' nodes cover and the most switches between two."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from common.vocabulary import Label
from webhook.placement_model.span import hops, span

T1, T2, T3 = Label.NETWORK_TIER_1, Label.NETWORK_TIER_2, Label.NETWORK_TIER_3


def _at(cluster: str, block: str, sub: str) -> dict[str, str]:
    # Values as the agent writes them: each names its parents (docs/network-position.md).
    return {T3: cluster, T2: f"{cluster}.{block}", T1: f"{cluster}.{block}.{sub}"}


FLEET = {
    "a1": _at("c", "b1", "s1"),
    "a2": _at("c", "b1", "s1"),
    "b1": _at("c", "b1", "s2"),
    "c1": _at("c", "b2", "s1"),
    "bare": {},
}


def test_a_job_in_one_sub_block_spans_one_domain_per_level_and_one_switch() -> None:
    got = span(["a1", "a1", "a2", "a2"], FLEET)
    assert (got.pods, got.nodes) == (4, 2)
    assert got.domains["network-tier-1"] == 1
    assert got.domains["network-tier-2"] == 1
    assert got.max_hops == 1


def test_a_job_over_two_blocks_says_two_blocks_and_five_switches() -> None:
    got = span(["a1", "b1", "c1"], FLEET)
    assert got.domains["network-tier-2"] == 2
    assert got.domains["network-tier-1"] == 3
    assert got.max_hops == 5  # a1 and c1 meet only at the tier-3 switch


def test_a_node_no_tier_relates_makes_the_most_hops_unknown_not_small() -> None:
    got = span(["a1", "bare"], FLEET)
    assert got.max_hops is None
    assert got.unknown_pairs == 1
    assert got.unlabelled["network-tier-2"] == 1


def test_pods_on_one_node_are_zero_hops_apart() -> None:
    assert span(["a1"] * 8, FLEET).max_hops == 0
    assert hops("bare", "bare", FLEET) == 0


names = st.sampled_from(sorted(FLEET))


@given(names, names)
def test_hops_are_symmetric(a: str, b: str) -> None:
    assert hops(a, b, FLEET) == hops(b, a, FLEET)


@given(st.lists(names, min_size=1, max_size=12))
def test_the_most_hops_is_the_worst_pair_of_the_job(placed: list[str]) -> None:
    got = span(placed, FLEET)
    pairs = [hops(a, b, FLEET) for a in placed for b in placed]
    if None in pairs:
        assert got.max_hops is None
    else:
        assert got.max_hops == max(pairs)
    assert got.domains["network-tier-2"] <= got.domains["network-tier-1"] <= got.nodes
