"""Link words and the GPU↔NIC pairing, checked on their own."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agent.discovery.links import Place, best_link, classify, worst_link
from agent.discovery.matching import maximum_matching
from agent.sources.cpu import format_cpulist, parse_cpulist

RP, UP, DOWN1, DOWN2 = "0000:10:01.0", "0000:11:00.0", "0000:12:00.0", "0000:12:01.0"
UP2, DOWN3 = "0000:13:00.0", "0000:14:00.0"


def place(rc: str, *ancestors: str, switch: str | None = None, numa: int | None = 0) -> Place:
    return Place(root_complex=rc, ancestors=ancestors, switch=switch, numa_node=numa)


CASES = [
    # one switch above both
    ("PIX", place("pci0000:10", RP, UP, DOWN1, switch=UP), place("pci0000:10", RP, UP, DOWN2,
                                                                switch=UP)),
    # one below the other's switch through a second switch: several bridges, no host bridge
    ("PXB", place("pci0000:10", RP, UP, DOWN1, switch=UP),
     place("pci0000:10", RP, UP, DOWN2, UP2, DOWN3, switch=UP2)),
    # different root ports of one host bridge
    ("PHB", place("pci0000:10", RP), place("pci0000:10", "0000:10:02.0")),
    # different host bridges, same known node
    ("NODE", place("pci0000:10", RP, numa=1), place("pci0000:20", "0000:20:01.0", numa=1)),
    # different host bridges, different nodes
    ("SYS", place("pci0000:10", RP, numa=0), place("pci0000:20", "0000:20:01.0", numa=1)),
    # different host bridges, one node unknown: SYS, as nvidia-smi prints it
    ("SYS", place("pci0000:10", RP, numa=0), place("pci0000:20", "0000:20:01.0", numa=None)),
    ("SYS", place("pci0000:10", RP, numa=None), place("pci0000:20", "0000:20:01.0", numa=None)),
    # same host bridge with unknown NUMA is still PHB: the tree says so
    ("PHB", place("pci0000:10", RP, numa=None), place("pci0000:10", "0000:10:02.0", numa=None)),
]  # fmt: skip


@pytest.mark.parametrize(("word", "a", "b"), CASES)
def test_classify(word: str, a: Place, b: Place) -> None:
    assert classify(a, b) == word
    assert classify(b, a) == word


def test_best_and_worst() -> None:
    assert best_link(["SYS", "PXB", "NODE"]) == "PXB"
    assert worst_link(["PIX", "PHB", "PXB"]) == "PHB"
    assert best_link([]) is None


def _brute_force_size(adjacent: list[list[int]], rights: int) -> int:
    best = 0
    lefts = len(adjacent)
    for k in range(min(lefts, rights), 0, -1):
        for chosen in itertools.combinations(range(lefts), k):
            for targets in itertools.permutations(range(rights), k):
                if all(t in adjacent[g] for g, t in zip(chosen, targets, strict=True)):
                    return k
    return best


@settings(max_examples=150, deadline=None)
@given(st.integers(0, 5).flatmap(lambda n: st.lists(
    st.lists(st.integers(0, 4), unique=True, max_size=5), min_size=n, max_size=n)))  # fmt: skip
def test_matching_is_maximum_and_one_to_one(adjacent: list[list[int]]) -> None:
    pairs = maximum_matching(adjacent)
    assert all(nic in adjacent[gpu] for gpu, nic in pairs.items())
    assert len(set(pairs.values())) == len(pairs)
    assert len(pairs) == _brute_force_size(adjacent, 5)


def test_matching_needs_augmenting_paths() -> None:
    # Greedy would give GPU0 NIC0 and leave GPU1 without one; the maximum pairs both.
    assert maximum_matching([[0, 1], [0]]) == {0: 1, 1: 0}


@given(st.frozensets(st.integers(0, 300)))
def test_cpulist_round_trip(cpus: frozenset[int]) -> None:
    assert parse_cpulist(format_cpulist(cpus)) == cpus


@pytest.mark.parametrize("text", ["1-", "a", "3-1", "-1", "0-99999999"])
def test_cpulist_rejects_garbage(text: str) -> None:
    with pytest.raises(ValueError):
        parse_cpulist(text)
