"""Random pods judged three ways, in rounds: each round takes the next case of every node,
asks explain and the extender about each while its node is in its holder-only state, binds
them (spec.nodeName: the kubelet alone decides), records what each kubelet did, deletes them,
and waits until every node is back in its holder-only state. Nodes run in parallel, a node's
own cases one after another."""

from __future__ import annotations

import json
import time
from collections import defaultdict, deque
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from e2e.cluster import Cluster
from e2e.kube import Kubectl
from tests.e2e.random_pods import Case, summary
from tests.e2e.truth_judges import (
    Available,
    Verdict,
    config_word,
    explain_all,
    extender,
    kubelet_config,
    kubelet_outcome,
    wait_available,
)

__all__ = ["Row", "run_rounds", "table"]

NUMA_FREE = "numa-free"  # explain's check group for "no NUMA node has room now"


@dataclass(frozen=True)
class Row:
    case: Case
    config: str
    explain: Verdict
    extender: Verdict
    kubelet: Verdict

    @property
    def explain_agrees(self) -> bool:
        return self.explain.fits == self.kubelet.fits

    @property
    def extender_word(self) -> str:
        """agrees; `not its check` where the kubelet refused for something the extender leaves
        to others (kube-scheduler's own resource fit: OutOf…; a node shape no free capacity
        could cure, which explain names and the webhook's affinity keeps pods off); else
        DISAGREES. The extender only drops nodes whose NUMA nodes lack room now."""
        if self.extender.fits == self.kubelet.fits:
            return "agrees"
        if self.extender.fits and self.kubelet.reason.startswith("OutOf"):
            return "not its check"
        if self.extender.fits and not self.explain.fits and self.explain.detail != NUMA_FREE:
            return "not its check"
        return "DISAGREES"


def run_rounds(
    cluster: Cluster,
    kubectl: Kubectl,
    namespace: str,
    cases: Sequence[Case],
    baseline: dict[str, Available],
    tmp: Path,
    *,
    deadline: float,
) -> list[Row]:
    """Every case judged (see the module doc); TimeoutError past `deadline` (monotonic)."""
    queues: dict[str, deque[Case]] = defaultdict(deque)
    for case in cases:
        queues[case.node].append(case)
    configs = {node: config_word(kubelet_config(cluster, node)) for node in queues}
    rows: list[Row] = []
    while any(queues.values()):
        if time.monotonic() > deadline:
            raise TimeoutError(f"{len(rows)} of {len(cases)} cases judged in the time allowed")
        batch = [q.popleft() for q in queues.values() if q]
        stored = [_stored(kubectl, namespace, case) for case in batch]
        said = explain_all(cluster, stored, namespace, tmp)
        filtered = [
            extender(cluster, kubectl, pod, case.node)
            for pod, case in zip(stored, batch, strict=True)
        ]
        for pod in stored:
            kubectl("create", "-n", namespace, "-f", "-", input=json.dumps(pod))
        done = [kubelet_outcome(kubectl, namespace, case.name) for case in batch]
        kubectl.run(
            "delete", "pod", *(c.name for c in batch), "-n", namespace, "--wait=true", timeout=120
        )
        for case in batch:
            wait_available(kubectl, case.node, baseline[case.node], "its holder-only state")
        rows += [
            Row(case, configs[case.node], e, x, k)
            for case, e, x, k in zip(batch, said, filtered, done, strict=True)
        ]
    return sorted(rows, key=lambda r: r.case.index)


def _stored(kubectl: Kubectl, namespace: str, case: Case) -> dict[str, Any]:
    """The pod as the API server stores it (defaults, requests from limits), bound to its node:
    what explain reads and the extender is sent, before it exists."""
    pod = json.loads(json.dumps(case.pod))
    pod["spec"]["nodeName"] = case.node
    done = kubectl.run(
        "create",
        "-n",
        namespace,
        "-f",
        "-",
        "--dry-run=server",
        "-o",
        "json",
        input=json.dumps(pod),
    )
    stored = json.loads(done.stdout)
    for key in ("uid", "resourceVersion", "creationTimestamp", "managedFields"):
        stored["metadata"].pop(key, None)
    stored.pop("status", None)
    return stored


def table(rows: Sequence[Row], seed: int) -> str:
    head = (
        f"{'case':>4} {'node':<17} {'kubelet config':<36} {'explain':<28} "
        f"{'extender':<28} {'kubelet':<24} agree  pod"
    )
    lines = [f"kubelet truth, seed {seed}, {len(rows)} cases", head]
    for r in rows:
        agree = "yes" if r.explain_agrees and r.extender_word != "DISAGREES" else "NO"
        ext = r.extender.word() + ("" if r.extender_word != "not its check" else " (n/a)")
        lines.append(
            f"{r.case.index:>4} {r.case.node:<17} {r.config:<36} {_cut(r.explain.word(), 28)} "
            f"{_cut(ext, 28)} {_cut(r.kubelet.word(), 24)} {agree:<5}  {summary(r.case.pod)}"
        )
    admitted = sum(r.kubelet.fits for r in rows)
    lines.append(
        f"kubelet admitted {admitted}, refused {len(rows) - admitted}; explain agrees "
        f"{sum(r.explain_agrees for r in rows)}/{len(rows)}; extender agrees "
        f"{sum(r.extender_word == 'agrees' for r in rows)}, not its check "
        f"{sum(r.extender_word == 'not its check' for r in rows)}, disagrees "
        f"{sum(r.extender_word == 'DISAGREES' for r in rows)}"
    )
    return "\n".join(lines)


def _cut(text: str, width: int) -> str:
    return (text if len(text) <= width else text[: width - 1] + "…").ljust(width)
