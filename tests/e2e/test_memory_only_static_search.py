"""The Static memory manager on a GB200 tray in NUMA mode (34 NUMA nodes), on real kubelets
v1.37.2: whether the kubelet starts, what it does with a Burstable and a Guaranteed pod, and
how its hint search grows with the NUMA nodes (trays with fewer empty MIG nodes: 2 + 4k).

Opt-in (`TOPOPLACE_E2E_STATIC_SEARCH=1`), never in `make e2e`: on 34 NUMA nodes it watches a
search that does not end for `WINDOW_34` seconds, and the kubelet's memory grows all along.

    TOPOPLACE_E2E_STATIC_SEARCH=1 pytest -m e2e -p no:cacheprovider \\
        tests/e2e/test_memory_only_static_search.py

Each Guaranteed pod is watched until the kubelet runs or refuses it, the window ends, or the
kubelet's resident memory passes `RSS_CAP` (then the node is stopped: this host is shared);
what was seen (seconds, the kubelet's CPU seconds, its peak RSS) is printed and written to
$TOPOPLACE_E2E_RECORD when set. docs/memory-only-numa.md gives the figures.
"""

from __future__ import annotations

import json
import os
import secrets
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from e2e import procs
from e2e.cluster import Cluster
from e2e.kube import Kubectl
from e2e.state import load
from tests.agent.discovery.memory_machines import gb200_tray
from tests.e2e.helpers import cluster_cli, explain

pytestmark = pytest.mark.skipif(
    os.environ.get("TOPOPLACE_E2E_STATIC_SEARCH") != "1",
    reason="opt-in: TOPOPLACE_E2E_STATIC_SEARCH=1 (minutes, and a kubelet that grows)",
)

WINDOW_34, WINDOW = 180.0, 120.0
RSS_CAP = 3 * 2**30
NODES_PER_GPU = (3, 4, 5, 8)  # 14, 18, 22 and 34 NUMA nodes
_CONFIG = {
    "cpuManagerPolicy": "static",
    "reservedSystemCPUs": "0,1",
    "topologyManagerPolicy": "restricted",
    "topologyManagerScope": "pod",
    "memoryManagerPolicy": "Static",
}


def _pod(name: str, node: str, *, guaranteed: bool) -> dict[str, Any]:
    """1 GPU; Guaranteed: 8 CPUs and 32Gi, requests = limits; else 1 CPU and 1Gi asked."""
    if guaranteed:
        res = {"limits": {"cpu": "8", "memory": "32Gi", "nvidia.com/gpu": 1}}
    else:
        res = {"requests": {"cpu": "1", "memory": "1Gi"}, "limits": {"nvidia.com/gpu": 1}}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {
            "nodeName": node,
            "terminationGracePeriodSeconds": 1,
            "containers": [{"name": "trainer", "image": "busybox:1", "resources": res}],
        },
    }


def _kubelet(cluster: Cluster, node: str) -> tuple[float, int]:
    """(CPU seconds, resident bytes) of the node's kubelet process, from /proc."""
    pid = int(procs.pid_file(cluster.state, f"kubelet-{node}").read_text())
    stat = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    ticks = os.sysconf("SC_CLK_TCK")
    cpu = (int(stat[11]) + int(stat[12])) / ticks  # utime, stime
    status = Path(f"/proc/{pid}/status").read_text()
    rss = next(int(line.split()[1]) for line in status.splitlines() if line.startswith("VmRSS"))
    return cpu, rss * 1024


def _watch(
    cluster: Cluster, kubectl: Kubectl, ns: str, node: str, name: str, window: float
) -> dict[str, Any]:
    """Create nothing; watch `name` until a verdict, the window's end, or RSS_CAP."""
    cpu0, _ = _kubelet(cluster, node)
    started, peak = time.monotonic(), 0
    seen: dict[str, Any] = {}

    def settled() -> bool:
        nonlocal peak
        cpu, rss = _kubelet(cluster, node)
        peak = max(peak, rss)
        status = kubectl.json("get", "pod", name, "-n", ns)["status"]
        phase = status.get("phase", "")
        seen.update(phase=phase, reason=status.get("reason", ""), cpu_s=round(cpu - cpu0, 1))
        return phase in ("Running", "Failed") or rss > RSS_CAP

    try:
        procs.wait_for(
            settled, f"the kubelet of {node} to answer {name}", timeout=window, interval=0.5
        )
    except TimeoutError:
        seen["window_ended"] = True
    seen |= {"seconds": round(time.monotonic() - started, 1), "peak_rss_mib": peak >> 20}
    if peak > RSS_CAP:
        seen["rss_cap_reached"] = True
    return seen


def _verdict(cluster: Cluster, obj: dict[str, Any], ns: str, tmp: Path, node: str) -> str:
    rows = {n["node"]: n for n in explain(cluster, obj, ns, tmp)["nodes"]}
    row = rows[node]
    return "fits" if row["fits"] else f"{row.get('check')}: {row.get('reason')}"[:300]


def _observe(
    cluster: Cluster, kubectl: Kubectl, ns: str, tmp: Path, per_gpu: int
) -> dict[str, Any]:
    numa = 2 + 4 * per_gpu
    node = f"gb200-static-{numa}"
    sysfs = tmp / node / "gb200-tray"  # the directory's name is the machine class
    sysfs.mkdir(parents=True)
    gb200_tray(sysfs, nodes_per_gpu=per_gpu)
    config = tmp / node / "kubelet.json"
    limit = {"topologyManagerPolicyOptions": {"max-allowable-numa-nodes": str(numa)}}
    config.write_text(json.dumps(_CONFIG | limit))
    t0 = time.monotonic()
    added = cluster_cli("add-node", node, "--sysfs", str(sysfs), "--kubelet-config", str(config))
    if added.returncode != 0:
        cluster_cli("remove-node", node)
        return {"numa_nodes": numa, "start": added.stderr.strip().splitlines()[-1][:300]}
    seen: dict[str, Any] = {"numa_nodes": numa, "start": "ok",
                            "start_s": round(time.monotonic() - t0, 1)}  # fmt: skip
    try:
        state = Path(load(cluster.state).nodes[node]["kubelet_root"]) / "memory_manager_state"
        seen["memory_numa"] = len(json.loads(state.read_text()).get("machineState") or {})
        for kind, guaranteed in (("burstable", False), ("guaranteed", True)):
            obj = _pod(f"{node}-{kind}", node, guaranteed=guaranteed)
            said = _verdict(cluster, obj, ns, tmp, node)
            kubectl("create", "-n", ns, "-f", "-", input=json.dumps(obj))
            window = WINDOW_34 if numa == 34 else WINDOW
            seen[kind] = {"explain": said} | _watch(
                cluster, kubectl, ns, node, obj["metadata"]["name"], window
            )
        ready = kubectl.json("get", "node", node)["status"]["conditions"]
        seen["node_ready"] = next(c["status"] for c in ready if c["type"] == "Ready")
    finally:
        kubectl.run("delete", "pods", "--all", "-n", ns, "--force", "--grace-period=0",
                    check=False, timeout=60)  # fmt: skip
        cluster_cli("remove-node", node)
    return seen


@pytest.fixture
def ml_namespace(kubectl: Kubectl) -> Iterator[str]:
    name = f"ml-e2e-static-{secrets.token_hex(3)}"
    kubectl("create", "namespace", name)
    procs.wait_for(
        lambda: kubectl.run("get", "sa", "default", "-n", name, check=False).returncode == 0,
        f"serviceaccount default in {name}",
    )
    yield name
    kubectl.run("delete", "namespace", name, "--wait=false", check=False)


def test_the_static_memory_manager_search_on_a_gb200_tray(
    cluster: Cluster, kubectl: Kubectl, ml_namespace: str, tmp_path: Path
) -> None:
    seen = {}
    for per_gpu in NODES_PER_GPU:
        numa = 2 + 4 * per_gpu
        seen[numa] = _observe(cluster, kubectl, ml_namespace, tmp_path, per_gpu)
        text = json.dumps(seen, indent=2, sort_keys=True)
        print(f"\n{numa} NUMA nodes: {json.dumps(seen[numa], sort_keys=True)}", flush=True)
        if os.environ.get("TOPOPLACE_E2E_RECORD"):
            Path(os.environ["TOPOPLACE_E2E_RECORD"]).write_text(text + "\n")
    for numa, s in seen.items():
        assert s["start"] == "ok", (numa, s)
        assert s["memory_numa"] == numa, (numa, s)  # every NUMA node, CPUs or not
        assert s["burstable"]["phase"] == "Running", (numa, s)
        assert s["burstable"]["explain"] == "fits", (numa, s)
    # On 34 NUMA nodes the Guaranteed pod gets no answer: neither run nor refused.
    assert seen[34]["guaranteed"]["phase"] == "Pending", seen[34]
    # explain's verdict, asked before the pod existed, is the kubelet's (no answer: refused).
    disagree = {
        numa: (s["guaranteed"]["explain"], s["guaranteed"]["phase"])
        for numa, s in seen.items()
        if (s["guaranteed"]["explain"] == "fits") != (s["guaranteed"]["phase"] == "Running")
    }
    assert disagree == {}
