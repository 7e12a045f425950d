"""Mutation engine scaling: per-pod mutate time vs number of loaded policies and containers.

Target: flat in the number of policies (lookup by name), ≤ 1 ms p99 for an 8-GPU worker pod.
The last row is one workload admission: a JobSet of 4 replicated jobs, each template mutated
as its pods would be (what a queue such as Kueue then counts).
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

from benchmarks.timing import time_calls
from benchmarks.webhook.workload import jobset, worker_pod, write_policy_dir
from webhook.engine.outcome import EngineSettings
from webhook.engine.recipe import mutate
from webhook.policy.loader import PolicySet, load_policy_dir
from webhook.workloads.mutation import mutate_workload

__all__ = ["run_engine_bench"]


def run_engine_bench(*, calls: int = 3000) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    settings = EngineSettings()
    cases = [(1, 1), (100, 1), (1000, 1), (1, 10), (1, 50)]
    with tempfile.TemporaryDirectory() as tmp:
        for policies_loaded, containers in cases:
            directory = write_policy_dir(
                Path(tmp) / f"p{policies_loaded}", extra_policies=policies_loaded - 1
            )
            policies = load_policy_dir(directory)
            pod = worker_pod(containers=containers)
            result = mutate(pod, "ml-team", policies, settings)
            if not result.patch:
                raise RuntimeError("bench pod was not mutated; check the bench policy")
            median, p99 = time_calls(
                lambda pod=pod, policies=policies: mutate(pod, "ml-team", policies, settings),
                calls=calls,
            )
            rows.append(
                {
                    "policies loaded": len(policies),
                    "containers": containers,
                    "patch ops": len(result.patch),
                    "median µs": median,
                    "p99 µs": p99,
                    "target": "p99 ≤ 1000 µs" if containers == 1 else "",
                    "met": "" if containers != 1 else ("yes" if p99 <= 1000 else "NO"),
                }
            )
        rows.append(_jobset_row(load_policy_dir(write_policy_dir(Path(tmp) / "js")), calls))
    return rows


def _jobset_row(policies: PolicySet, calls: int) -> dict[str, Any]:
    """One JobSet admission: 4 templates, 1 worker container each."""
    obj = jobset(replicated_jobs=4)
    settings = EngineSettings()
    result = mutate_workload(obj, "ml-team", policies, settings)
    if result.templates != 4 or not result.patch:
        raise RuntimeError("bench JobSet was not mutated; check the bench policy")
    median, p99 = time_calls(
        lambda: mutate_workload(obj, "ml-team", policies, settings), calls=calls
    )
    return {
        "policies loaded": len(policies),
        "containers": "JobSet: 4 jobs × 1",
        "patch ops": len(result.patch),
        "median µs": median,
        "p99 µs": p99,
        "target": "p99 ≤ 4000 µs (4 pods)",
        "met": "yes" if p99 <= 4000 else "NO",
    }


if __name__ == "__main__":
    from benchmarks.table import markdown_table

    print(markdown_table(run_engine_bench()))
