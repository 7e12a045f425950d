"""`make bench-churn`: the agents' writes caused by pod churn on make cluster's real kubelets.

The scale bench's nodes have no kubelet and so no agent; this part runs on `make cluster`
(5 real kubelets, a real agent on each; uses a running one, or starts one and stops it).
Pods: Guaranteed, 1 exclusive CPU, no node named (kube-scheduler spreads them), created
`--batch` at a time, seen Running, then deleted and seen gone, until `--pods` have started and
stopped. The agents' writes (Node and NodeResourceTopology creates, patches, updates,
deletes) come from the API server's audit log (e2e/controlplane/audit.py), counted over the
churn window plus the agents' follow-up passes (SETTLE). A watch on the NodeResourceTopologies
over the same window counts the changes the API server stored: a patch that changes nothing
is recorded in the audit log but stores nothing and sends no watch event, so audited NRT
writes less watch events are the no-op writes. An idle window of the same agents
before the churn shows what they write with no pod changing. Prints the figures and writes
them as JSON (`--output`), which `make bench-scale` reads into its `agent writes/s per pod/s`
column.
"""

from __future__ import annotations

import argparse
import json
import secrets
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

from benchmarks.e2e.bench_e2e import running_cluster
from e2e import procs
from e2e.controlplane.audit import count_writes, lines_of
from e2e.kube import Kubectl
from e2e.topoplace.install import REPO
from tests.e2e.helpers import AGENT_USER
from tests.e2e.nrt_truth import plain_pod

__all__ = ["CHURN_RESULT", "churn", "churn_cell", "churn_note", "load_result", "main"]

CHURN_RESULT = REPO / "benchmarks" / "results-churn.json"
SETTLE = 8.0  # the agents' follow-up passes end 7 s after a pod's last event
_TIMEOUT = 300.0


def _pods(k: Kubectl, namespace: str) -> list[dict[str, Any]]:
    return k.json("get", "pods", "-n", namespace)["items"]


def _batch(k: Kubectl, namespace: str, names: list[str]) -> Counter[str]:
    """Start the pods, wait until all run, delete them, wait until all are gone."""
    pods = []
    for name in names:
        pod = plain_pod(name, "")
        del pod["spec"]["nodeSelector"]
        pods.append(pod)
    k.apply(pods, "-n", namespace)
    running: list[dict[str, Any]] = procs.wait_for(
        lambda: (
            items
            if len(items := _pods(k, namespace)) == len(names)
            and all(p["status"].get("phase") == "Running" for p in items)
            else None
        ),
        f"{len(names)} churn pods Running",
        timeout=_TIMEOUT,
    )
    k("delete", "pods", "--all", "-n", namespace, "--wait=false")
    procs.wait_for(lambda: not _pods(k, namespace), "churn pods gone", timeout=_TIMEOUT)
    return Counter(p["spec"]["nodeName"] for p in running)


def _watch(k: Kubectl) -> subprocess.Popen[str]:
    """A watch printing one line per change stored to any NodeResourceTopology; returns once
    it has printed the initial list, so it is connected and misses no change after."""
    objects = len(k.json("get", "noderesourcetopologies")["items"])
    watch = subprocess.Popen(
        [str(k.binary), f"--kubeconfig={k.kubeconfig}", "get", "noderesourcetopologies",
         "--watch", "-o", "name"],
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
    )  # fmt: skip
    for _ in range(objects):
        if watch.stdout is None or not watch.stdout.readline():
            raise RuntimeError("kubectl get noderesourcetopologies --watch ended at once")
    return watch


def _stop(watch: subprocess.Popen[str]) -> int:
    watch.terminate()
    out, _ = watch.communicate(timeout=30)
    return len(out.splitlines())


def _nrt_writes(writes: dict[str, Any]) -> int:
    return sum(
        n for kind, n in writes["by kind"].items() if kind.endswith("noderesourcetopologies")
    )


def _writes(audit: Path, start: float, end: float) -> dict[str, Any]:
    count = count_writes(lines_of(audit), user=AGENT_USER, start=start, end=end)
    return {
        "writes": count.total,
        "by kind": {f"{verb} {res}": n for (verb, res), n in sorted(count.by_kind.items())},
        "refused": count.failed,
        "malformed lines": count.malformed,
    }


def _run(k: Kubectl, audit: Path, namespace: str, *, pods: int, batch: int) -> dict[str, Any]:
    placed: Counter[str] = Counter()
    watch = _watch(k)
    start = time.time()
    for first in range(0, pods, batch):
        names = [f"churn-{i}" for i in range(first, min(first + batch, pods))]
        placed += _batch(k, namespace, names)
    churned = time.time() - start
    time.sleep(SETTLE)  # part of the window: the follow-up passes the churn caused
    window = time.time() - start
    stored = _stop(watch)
    writes = _writes(audit, start, start + window)
    return {
        "pods": pods,
        "batch": batch,
        "pods per node": dict(sorted(placed.items())),
        "churn s": round(churned, 1),
        "window s": round(window, 1),
        "pods/s": pods / window,
        "agent writes/s": writes["writes"] / window,
        "writes per pod": writes["writes"] / pods,
        "agent writes": writes,
        "NRT changes stored": stored,
        "no-op NRT writes": _nrt_writes(writes) - stored,
    }


def churn(
    k: Kubectl, audit: Path, *, runs: dict[str, tuple[int, int]], idle: float
) -> dict[str, Any]:
    """An idle window, then each run (name: (pods, batch)) in turn, in one namespace."""
    namespace = f"churn-{secrets.token_hex(3)}"
    k("create", "namespace", namespace)
    try:
        procs.wait_for(
            lambda: k.run("get", "sa", "default", "-n", namespace, check=False).returncode == 0,
            f"serviceaccount default in {namespace}",
        )
        idle_start = time.time()
        time.sleep(idle)  # a measurement window with no pod changing, not a synchronisation
        result: dict[str, Any] = {
            "nodes": len(k.json("get", "nodes")["items"]),
            "idle s": idle,
            "idle agent writes": _writes(audit, idle_start, time.time()),
        }
        for name, (pods, batch) in runs.items():
            result[name] = _run(k, audit, namespace, pods=pods, batch=batch)
    finally:
        k.run("delete", "namespace", namespace, "--wait=false", check=False)
    return result


def churn_cell(result: dict[str, Any] | None, nodes: int) -> str:
    """The scale table's `agent writes/s per pod/s` cell. At the real nodes' count: the busy
    run. Larger fleets: the sparse run's ratio, carried (see churn_note)."""
    if result is None:
        return "not measured (make bench-churn: see below)"
    if nodes == result["nodes"]:
        return f"{_ratio(result['busy']):.2f} (measured)"
    if "sparse" not in result:
        return "not measured (make bench-churn without --sparse-pods 0)"
    return f"{_ratio(result['sparse']):.2f} (carried: sparse run on {result['nodes']} real nodes)"


def _ratio(run: dict[str, Any]) -> float:
    return run["agent writes/s"] / run["pods/s"]


def _run_text(run: dict[str, Any]) -> str:
    w = run["agent writes"]
    kinds = ", ".join(f"{n} {k}" for k, n in w["by kind"].items()) or "no write"
    placed = ", ".join(f"{node} {n}" for node, n in run["pods per node"].items())
    return (
        f"{run['pods']} pods started and stopped {run['batch']} at a time (placed {placed}) "
        f"in {run['window s']} s with the follow-up passes: "
        f"{run['pods/s']:.2f} pods/s, {run['agent writes/s']:.2f} agent writes/s ({kinds}; "
        f"{w['refused']} refused), {_ratio(run):.2f} writes per pod; "
        f"{run['NRT changes stored']} NodeResourceTopology changes stored (watch), so "
        f"{run['no-op NRT writes']} no-op writes"
    )


def churn_note(result: dict[str, Any] | None) -> str:
    """The note under the scale table that says where the agents' figures come from."""
    if result is None:
        return (
            "- Agent writes: not measured in this run. The scale bench's Nodes have no kubelet "
            "and so no agent; `make bench-churn` measures them on make cluster's real kubelets "
            f"and writes {CHURN_RESULT.relative_to(REPO)}, which this table then reads."
        )
    text = (
        f"- Agent writes/s per pod/s: `make bench-churn` ({result['measured at']}, commit "
        f"{result['commit']}) on make cluster's {result['nodes']} real kubelets, each with its "
        "real agent; pods Guaranteed with 1 exclusive CPU, placed by kube-scheduler; writes "
        "from the API server's audit log. Busy (the measured row): "
        f"{_run_text(result['busy'])}. Idle {result['idle s']:.0f} s before: "
        f"{result['idle agent writes']['writes']} writes."
    )
    if "sparse" in result:
        text += (
            f" Sparse: {_run_text(result['sparse'])}.\n- The 1,000 and 5,000 rows carry the "
            "sparse ratio, not the busy one. Each agent writes only its own node's Node and "
            "NodeResourceTopology, only on change and at most once a second, so the writes "
            "follow the pod churn each node sees, not the node count: a busy node's burst "
            "folds into one write a second (the busy ratio), while the same fleet-wide pods/s "
            "spread over 1,000 or 5,000 nodes gives each node a pod now and then, and each "
            "start and each stop costs its own write (the sparse ratio). API server write "
            "load from the agents = that ratio × the fleet's pods/s, whatever the node count."
        )
    return text


def load_result(path: Path = CHURN_RESULT) -> dict[str, Any] | None:
    """The last `make bench-churn` figures; None when it has not run here."""
    try:
        return json.loads(path.read_text())
    except FileNotFoundError:
        return None


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.scale.churn", description=__doc__)
    parser.add_argument("--pods", type=int, default=1000, help="pod starts and stops")
    parser.add_argument("--batch", type=int, default=50, help="pods started at once")
    parser.add_argument(
        "--sparse-pods", type=int, default=100, help="then this many (0: none), one at a time"
    )
    parser.add_argument("--sparse-batch", type=int, default=1, help="pods started at once")
    parser.add_argument("--idle", type=float, default=30.0, help="idle window first, seconds")
    parser.add_argument("--output", type=Path, default=CHURN_RESULT)
    args = parser.parse_args()
    if min(args.pods, args.batch, args.sparse_batch) < 1 or args.sparse_pods < 0:
        parser.error(
            "--pods, --batch and --sparse-batch must be at least 1, --sparse-pods at least 0 "
            f"(got {args.pods}, {args.batch}, {args.sparse_batch}, {args.sparse_pods})"
        )
    runs = {"busy": (args.pods, args.batch)}
    if args.sparse_pods:
        runs["sparse"] = (args.sparse_pods, args.sparse_batch)
    cluster, started_here = running_cluster()
    try:
        result = churn(
            cluster.kubectl,
            Path(cluster.info["audit_log"]),
            runs=runs,
            idle=args.idle,
        )
    finally:
        if started_here:
            subprocess.run([sys.executable, "-m", "e2e.cluster", "down"], check=False)
    result["commit"] = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True, text=True
    ).stdout.strip()
    result["measured at"] = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    args.output.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
