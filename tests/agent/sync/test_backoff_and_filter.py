"""Backoff arithmetic and the cache watcher's event filter (both pure)."""

from __future__ import annotations

from pathlib import Path

import pytest
from watchfiles import Change

from agent.sync.labels.cache_watch import CacheFilter
from common.backoff import Backoff, BackoffPolicy
from common.cache_layout import LOCK_FILE, MARKER_FILE, TEMP_PREFIX


def test_full_jitter_stays_under_a_growing_capped_ceiling() -> None:
    ceilings = [0.5, 1, 2, 4, 8, 10, 10]
    top = Backoff(BackoffPolicy(initial=0.5, cap=10), rand=lambda: 1.0)
    assert [top.next_delay() for _ in ceilings] == ceilings
    low = Backoff(BackoffPolicy(initial=0.5, cap=10, floor=0.1), rand=lambda: 0.0)
    assert {low.next_delay() for _ in ceilings} == {0.1}  # never zero: no spinning


def test_retry_after_is_obeyed_as_given_not_stretched_and_not_counted() -> None:
    b = Backoff(BackoffPolicy(initial=0.5, cap=10, retry_after_cap=120), rand=lambda: 1.0)
    for _ in range(6):
        b.next_delay()  # six failures: the exponential ceiling is now 10 s
    assert b.next_delay(retry_after=1) == 1  # not max(1, our ceiling)
    assert b.next_delay(retry_after=7) == 7
    assert b.next_delay(retry_after=86400) == 120  # a bad header cannot park us for days
    assert b.next_delay(retry_after=0) == 0.1  # never spin, whatever the server says
    assert b.attempts == 10  # four more failures, but server-timed: not exponential steps
    assert b.next_delay() == 10
    b.reset()
    assert b.next_delay() == 0.5


def test_urgent_bounds_the_ceiling_but_keeps_jitter_and_the_floor() -> None:
    top = Backoff(BackoffPolicy(initial=0.5, cap=60, urgent_cap=1.5), rand=lambda: 1.0)
    assert [top.next_delay(urgent=True) for _ in range(8)] == [0.5, 1, 1.5, 1.5, 1.5, 1.5, 1.5, 1.5]
    assert top.next_delay() == 60  # the exponential count went on underneath
    low = Backoff(BackoffPolicy(urgent_cap=1.5, floor=0.1), rand=lambda: 0.0)
    assert low.next_delay(urgent=True) == low.urgent_delay() == 0.1


def test_an_inconsistent_policy_is_refused() -> None:
    with pytest.raises(ValueError, match="inconsistent"):
        BackoffPolicy(initial=5, cap=1)


ROOT = Path("/cache")


@pytest.mark.parametrize(
    ("change", "rel", "relevant"),
    [
        (Change.added, f"imagenet/2024-06/{MARKER_FILE}", True),
        (Change.deleted, f"imagenet/2024-06/{MARKER_FILE}", True),
        (Change.deleted, "imagenet/2024-06", True),  # version directory removed
        (Change.deleted, "imagenet", True),  # whole dataset removed
        (Change.deleted, "", True),  # the root itself
        (Change.added, "imagenet/2024-06/part-00001.bin", False),
        (Change.modified, "imagenet/2024-06/sub/dir/file", False),
        (Change.added, f"imagenet/{TEMP_PREFIX}x/shard-1.tar", False),
        (Change.added, f"imagenet/{TEMP_PREFIX}x/{MARKER_FILE}", False),
        (Change.deleted, f"imagenet/{TEMP_PREFIX}x", False),
        (Change.added, f"imagenet/{LOCK_FILE}", False),
        (Change.modified, f"imagenet/{LOCK_FILE}", False),
        (Change.added, "imagenet/2024-06", False),  # created empty (it holds no marker)
    ],
)
def test_only_changes_that_can_move_a_dataset_label_count(
    change: Change, rel: str, relevant: bool
) -> None:
    assert CacheFilter(ROOT)(change, str(ROOT / rel) if rel else str(ROOT)) is relevant


def test_a_complete_version_moved_in_counts(tmp_path: Path) -> None:
    (tmp_path / "coco/2017").mkdir(parents=True)
    (tmp_path / "coco/2017" / MARKER_FILE).write_text("{}")
    watch_filter = CacheFilter(tmp_path)
    assert watch_filter(Change.added, str(tmp_path / "coco/2017"))
    assert watch_filter(Change.added, str(tmp_path / "coco"))
    assert not watch_filter(Change.added, str(tmp_path.parent / "elsewhere"))
