"""Per-call timing with perf_counter_ns: median and p99 over many calls of a function."""

from __future__ import annotations

import gc
import statistics
import time
from collections.abc import Callable

__all__ = ["time_calls"]


def time_calls(fn: Callable[[], object], *, calls: int, warmup: int = 50) -> tuple[float, float]:
    """(median µs, p99 µs) of `fn()` over `calls` calls, GC paused so a collection lands
    in no single sample by chance (it is still paid: gc runs between batches)."""
    for _ in range(warmup):
        fn()
    samples: list[int] = []
    gc.collect()
    gc.disable()
    try:
        for i in range(calls):
            start = time.perf_counter_ns()
            fn()
            samples.append(time.perf_counter_ns() - start)
            if i % 500 == 499:
                gc.enable()
                gc.collect()
                gc.disable()
    finally:
        gc.enable()
    samples.sort()
    p99 = samples[min(len(samples) - 1, int(len(samples) * 0.99))]
    return statistics.median(samples) / 1000, p99 / 1000
