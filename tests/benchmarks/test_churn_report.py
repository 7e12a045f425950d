"""The scale table's agent-writes cell and note from `make bench-churn`'s figures
(benchmarks/scale/churn.py): measured at the real nodes' count, the sparse ratio carried."""

from __future__ import annotations

from typing import Any

from benchmarks.scale.churn import churn_cell, churn_note


def _run(pods: int, batch: int, writes: int, stored: int, window: float) -> dict[str, Any]:
    return {
        "pods": pods,
        "batch": batch,
        "pods per node": {"dgx-h100-a": pods // 2, "dgx-h100-b": pods - pods // 2},
        "churn s": window - 8,
        "window s": window,
        "pods/s": pods / window,
        "agent writes/s": writes / window,
        "writes per pod": writes / pods,
        "agent writes": {
            "writes": writes,
            "by kind": {"patch noderesourcetopologies": writes},
            "refused": 0,
            "malformed lines": 0,
        },
        "NRT changes stored": stored,
        "no-op NRT writes": writes - stored,
    }


RESULT = {
    "nodes": 5,
    "idle s": 30.0,
    "idle agent writes": {"writes": 0, "by kind": {}, "refused": 0, "malformed lines": 0},
    "busy": _run(1000, 50, 1100, 1100, 400.0),
    "sparse": _run(200, 5, 410, 400, 300.0),
    "commit": "abc1234",
    "measured at": "2026-12-04 04:30 UTC",
}


def test_the_real_nodes_row_gets_the_busy_ratio_and_larger_fleets_the_sparse_one() -> None:
    assert churn_cell(RESULT, 5) == "1.10 (measured)"
    assert churn_cell(RESULT, 1000).startswith("2.05 (carried")
    assert churn_cell(RESULT, 5000) == churn_cell(RESULT, 1000)


def test_without_a_sparse_run_larger_fleets_say_so() -> None:
    busy_only = {k: v for k, v in RESULT.items() if k != "sparse"}
    assert churn_cell(busy_only, 1000).startswith("not measured")
    assert "carry" not in churn_note(busy_only)


def test_without_figures_the_cell_and_note_point_to_bench_churn() -> None:
    assert "make bench-churn" in churn_cell(None, 5)
    assert "make bench-churn" in churn_note(None)


def test_the_note_names_the_no_op_writes_and_the_carry() -> None:
    note = churn_note(RESULT)
    assert "so 10 no-op writes" in note  # sparse: 410 audited, 400 stored
    assert "so 0 no-op writes" in note
    assert "1,000 and 5,000 rows carry the sparse ratio" in note
