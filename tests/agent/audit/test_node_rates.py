"""Each NUMA node's remote-allocation share from numastat samples: a figure per full window,
idle windows keep the last figure, a counter that goes backwards is unknown (said once)."""

from __future__ import annotations

import logging

import pytest

from agent.audit.node_rates import RemoteRates, percent
from agent.sources.numa_stat import NodeCounters


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def counters(local: int, other: int) -> NodeCounters:
    return NodeCounters(numa_hit=local + other, numa_miss=0, numa_foreign=0,
                        local_node=local, other_node=other)  # fmt: skip


def test_a_share_per_full_window_and_nothing_between() -> None:
    clock = Clock()
    rates = RemoteRates(window=60, min_pages=1000, clock=clock)
    assert rates.sample({0: counters(10_000, 0), 1: counters(5_000, 0)}) == {0: None, 1: None}
    clock.now = 30  # half a window: no figure yet, whatever the counters say
    assert rates.sample({0: counters(90_000, 90_000), 1: counters(5_000, 0)}) == {0: None, 1: None}
    clock.now = 61
    shares = rates.sample({0: counters(70_000, 20_000), 1: counters(5_100, 0)})
    assert shares[0] == pytest.approx(20_000 / 80_000)
    assert shares[1] is None  # 100 pages in a minute: idle, no figure to keep yet
    clock.now = 125
    shares = rates.sample({0: counters(70_500, 20_100), 1: counters(105_100, 0)})
    assert shares[0] == pytest.approx(0.25)  # idle window: the last figure stays
    assert shares[1] == 0.0


def test_counters_going_backwards_are_unknown_for_the_window_and_said_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    clock = Clock()
    rates = RemoteRates(window=60, min_pages=10, clock=clock)
    rates.sample({0: counters(1_000, 1_000)})
    clock.now = 60
    assert rates.sample({0: counters(2_000, 2_000)}) == {0: 0.5}
    clock.now = 120
    with caplog.at_level(logging.WARNING):
        assert rates.sample({0: counters(5, 5)}) == {0: None}  # reset: never "no remote"
    assert len([r for r in caplog.records if "went backwards" in r.getMessage()]) == 1
    clock.now = 180
    assert rates.sample({0: counters(105, 5)}) == {0: 0.0}  # restarted from the new values
    clock.now = 240
    assert rates.sample({}) == {}  # the node's file vanished: no figure for it


@pytest.mark.parametrize(
    ("share", "want"), [(None, None), (0.0, 0), (0.024, 0), (0.026, 5), (0.51, 50), (1.0, 100)]
)
def test_the_published_percent_is_coarse(share: float | None, want: int | None) -> None:
    assert percent(share) == want
