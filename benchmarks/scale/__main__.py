"""`make bench-scale`: python -m benchmarks.scale [--nodes 5,1000,5000] [--pods 1000] …

One control plane for the run; the fleet grows from size to size (the first N nodes of the
larger fleet), the webhook restarts at each size so its cache fill is timed from a cold
start, and everything is torn down at the end. Writes benchmarks/results-scale.md.
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path
from typing import Any

from benchmarks.__main__ import _machine
from benchmarks.scale.churn import churn_cell, churn_note, load_result
from benchmarks.scale.fleet import USE_MIX, fleet, nrt_object, write_all
from benchmarks.scale.measure import admission, explain_seconds, extender_times, throughput
from benchmarks.scale.stack import OFF_CONTROLLERS, SCHEDULER_CLIENT, Stack, running_stack
from common.node_resource_topology import GROUP, PLURAL, VERSION
from e2e.controlplane.numa_scheduler import NAME as NUMA_SCHEDULER
from e2e.nodes.fleet import rss_mib
from e2e.topoplace.install import REPO

_NRTS = f"/apis/{GROUP}/{VERSION}/{PLURAL}"
_SMALL_FLEET_PODS = 24  # 5 nodes hold 32 GPUs the extender lets through (fleet.USE_MIX)


def _hwm_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return 0.0


def _grow(stack: Stack, nodes: list[dict[str, Any]], have: int, want: int, workers: int) -> float:
    started = time.monotonic()
    new = nodes[have:want]
    write_all(stack.api.add_node, new, workers=workers)
    nrts = [nrt_object(n, i) for i, n in enumerate(new, start=have)]
    write_all(lambda o: stack.api.create(_NRTS, o), nrts, workers=workers)
    return time.monotonic() - started


def _size(
    stack: Stack, nodes: list[dict[str, Any]], n: int, args: argparse.Namespace
) -> tuple[dict[str, Any], dict[str, Any]]:
    pid, full_s = stack.start_webhook()
    rss = rss_mib(pid)
    stack.register_webhook()  # its new port
    stack.say(f"{n} nodes: webhook caches full in {full_s:.1f} s, RSS {rss:.0f} MiB")
    lat = admission(stack, args.admission_pods)
    stack.say(f"{n} nodes: admission {lat}")
    names = [x["metadata"]["name"] for x in nodes[:n]]
    ext = extender_times(stack, names, calls=args.extender_calls)
    ext20 = extender_times(stack, names, calls=max(3, args.extender_calls // 4), containers=20)
    stack.say(f"{n} nodes: extender {ext}, 20 containers {ext20}")
    explain_s = explain_seconds(stack, stack.cp.state)
    stack.say(f"{n} nodes: explain {explain_s:.2f} s")
    pods = min(args.pods, _SMALL_FLEET_PODS) if n < 10 else args.pods
    timeout = max(120.0, pods * 0.5)
    default = throughput(stack, "default-scheduler", pods, timeout=timeout)
    numa = throughput(stack, NUMA_SCHEDULER, pods, timeout=timeout)
    stack.say(f"{n} nodes: default {default}, numa {numa}")
    row = {
        "nodes": n,
        "webhook RSS MB": rss * 1.048576,
        "caches full s": full_s,
        "added p50 ms": lat["webhook p50"] - lat["none p50"],
        "added p99 ms": lat["webhook p99"] - lat["none p99"],
        "default-scheduler pods/s": default["pods/s"],
        "topoplace-numa-scheduler pods/s": numa["pods/s"],
        "ratio": numa["pods/s"] / default["pods/s"] if default["pods/s"] else 0.0,
        "explain s": explain_s,
        "agent writes/s per pod/s": churn_cell(load_result(), n),
    }
    detail = {
        "nodes": n,
        "pods per scheduler": pods,
        "bound default / numa": f"{default['bound']} / {numa['bound']}",
        "no mutation p50 / p99 ms": f"{lat['none p50']:.2f} / {lat['none p99']:.2f}",
        "webhook p50 / p99 ms": f"{lat['webhook p50']:.2f} / {lat['webhook p99']:.2f}",
        "filter p50 / p99 ms": f"{ext['filter p50']:.1f} / {ext['filter p99']:.1f}",
        "prioritize p50 / p99 ms": f"{ext['prioritize p50']:.1f} / {ext['prioritize p99']:.1f}",
        "filter, 20 containers p99 ms": ext20["filter p99"],
        "webhook peak RSS MB": _hwm_mib(pid) * 1.048576,
    }
    return row, detail


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.scale", description=__doc__)
    parser.add_argument("--nodes", default="5,1000,5000", help="fleet sizes, ascending")
    parser.add_argument("--pods", type=int, default=1000, help="pods per scheduler and size")
    parser.add_argument("--admission-pods", type=int, default=200, help="per path, after 20")
    parser.add_argument("--extender-calls", type=int, default=40)
    parser.add_argument("--workers", type=int, default=8, help="concurrent fleet writers")
    parser.add_argument(
        "--state",
        type=Path,
        default=Path(os.environ.get("TOPOPLACE_E2E_STATE") or REPO / ".bench-scale"),
        help="state directory (default $TOPOPLACE_E2E_STATE, else .bench-scale)",
    )
    parser.add_argument("--output", type=Path, default=REPO / "benchmarks" / "results-scale.md")
    args = parser.parse_args()
    args.sizes = sorted(int(x) for x in args.nodes.split(","))
    began = time.monotonic()

    def say(text: str) -> None:
        print(f"[bench-scale {time.monotonic() - began:6.1f}s] {text}", flush=True)

    nodes = fleet(args.sizes[-1])
    rows, details, made = [], [], []
    with running_stack(args.state, say) as stack:
        have = 0
        for n in args.sizes:
            made.append(
                {
                    "nodes": n,
                    "written": (n - have) * 2,
                    "seconds": _grow(stack, nodes, have, n, args.workers),
                }
            )
            say(f"fleet at {n} nodes: {made[-1]}")
            have = n
            row, detail = _size(stack, nodes, n, args)
            rows.append(row)
            details.append(detail)
    _write(args, rows, details, made)
    return 0


def _write(args: argparse.Namespace, rows: list[Any], details: list[Any], made: list[Any]) -> None:
    from benchmarks.table import markdown_table

    text = "\n".join(
        [
            f"# Topoplace at fleet size (make bench-scale)\n\n{_machine()}\n",
            "Real etcd, kube-apiserver, kube-controller-manager (controllers off: "
            f"{', '.join(OFF_CONTROLLERS)}, so Nodes without a kubelet stay Ready), two stock "
            "kube-schedulers started in turn once their pods wait (both with client limits "
            f"qps {SCHEDULER_CLIENT['qps']}, burst {SCHEDULER_CLIENT['burst']}: the defaults, 50 "
            "and 100, capped both at ~55.5 pods/s), the webhook as a host process "
            "(`serve --node-cache --numa-scheduling`). Nodes: docs/examples/nodes.yaml's machine "
            "classes cloned; NodeResourceTopology GPU use by node index mod 4: "
            f"{', '.join(USE_MIX)}. "
            f"Run: `python -m benchmarks.scale --nodes {args.nodes} --pods {args.pods} "
            f"--admission-pods {args.admission_pods}`.\n",
            markdown_table(rows),
            "## Details\n",
            markdown_table(details),
            "## Fleet creation (not timed in the figures above)\n",
            markdown_table(made),
            "## Notes\n",
            churn_note(load_result()) + "\n",
        ]
    )
    args.output.write_text(text)
    print(text)


if __name__ == "__main__":
    raise SystemExit(main())
