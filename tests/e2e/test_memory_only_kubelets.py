"""Real kubelets on machines with CPU-less NUMA nodes (Grace trays in NUMA mode, a CXL expander):
whether each starts, which NUMA nodes it counts, and what it admits for 1, 2 and 4 GPUs with
CPUs and memory, with and without `max-allowable-numa-nodes` and the Static memory manager.

What was seen is docs/memory-only-numa.md's table; EXPECTED (memory_only_cases.py) is it,
so a kubelet that behaves otherwise fails here. Every case runs, then the comparison: one run
records all.
The record is also written to $TOPOPLACE_E2E_RECORD (a JSON file) when set.

Not here: the Static memory manager on the 34-node GB200 tray, whose hint search walks every
subset of the machine's NUMA nodes for each Guaranteed pod (2^34 sets): it never answers, and
tests/e2e/test_memory_only_static_search.py (opt-in) watches that, and how the search grows.
"""

from __future__ import annotations

import json
import os
import re
import secrets
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from agent.discovery.discover import DiscoveryOptions, discover
from agent.sources.podresources import list_pod_resources
from e2e import procs
from e2e.cluster import Cluster
from e2e.kube import Kubectl
from e2e.state import load
from tests.agent.discovery import machines
from tests.e2e.helpers import cluster_cli, explain
from tests.e2e.kubelet_truth import phase, wait_admitted_or_refused
from tests.e2e.memory_only_cases import CASES, EXPECTED, PODS


def _pod(name: str, node: str, gpus: int, cpu: int, memory: str) -> dict[str, Any]:
    limits = {"cpu": str(cpu), "memory": memory, "nvidia.com/gpu": gpus}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {
            "nodeSelector": {"kubernetes.io/hostname": node},
            "terminationGracePeriodSeconds": 1,
            "containers": [
                {"name": "trainer", "image": "busybox:1", "resources": {"limits": limits}}
            ],
        },
    }


def _start_reason(stderr: str) -> str:
    found = re.search(r"unsupported on machines with more than \d+ NUMA Nodes", stderr)
    return found[0] if found else stderr.strip().splitlines()[-1][:200]


def _memory_numa(kubelet_root: Path) -> list[int] | None:
    state = kubelet_root / "memory_manager_state"
    if not state.exists():
        return None
    doc = json.loads(state.read_text())  # policy None keeps the file, without a machine state
    return sorted(int(n) for n in (doc.get("machineState") or {})) or None


def _given(record: dict[str, Any], ns: str, name: str) -> dict[str, list[int]]:
    """The NUMA nodes of what the kubelet gave the pod: exclusive CPUs, GPUs, pinned memory
    (PodResources List on the node's socket, CPUs placed by the machine's tree)."""
    found = [p for p in list_pod_resources(Path(record["pod_resources_socket"]))
             if (p.namespace, p.name) == (ns, name)]  # fmt: skip
    if not found:
        return {}
    (c,) = found[0].containers
    topo = discover(DiscoveryOptions(sysfs_root=Path(record["sysfs"]), use_nvml=False)).topology
    where = {cpu: n.id for n in topo.numa_nodes for cpu in n.cpus}
    return {
        "cpus": sorted({where[i] for i in c.cpu_ids}),
        "gpus": sorted({n for d in c.devices for n in d.numa_nodes}),
        "memory": sorted({n for m in c.memory for n in m.numa_nodes}),
    }


def _explained(cluster: Cluster, obj: dict[str, Any], ns: str, tmp: Path, node: str) -> str:
    """explain's verdict on `node` before the pod exists: "fits", or its check and reason."""
    try:
        rows = {n["node"]: n for n in explain(cluster, obj, ns, tmp)["nodes"]}
    except (AssertionError, ValueError) as exc:
        return f"explain failed: {exc}"[:300]
    row = rows.get(node)
    if row is None:
        return "explain did not list the node"
    return "fits" if row["fits"] else f"{row.get('check')}: {row.get('reason')}"[:300]


def _try(
    cluster: Cluster,
    kubectl: Kubectl,
    ns: str,
    tmp: Path,
    node: str,
    pod: str,
    record: dict[str, Any],
) -> dict[str, Any]:
    gpus, cpu, memory = PODS[pod]
    name = f"{node}-{pod}"
    obj = _pod(name, node, gpus, cpu, memory)
    said = _explained(cluster, obj, ns, tmp, node)
    kubectl.run("create", "-n", ns, "-f", "-", input=json.dumps(obj))
    try:
        procs.wait_for(
            lambda: kubectl.json("get", "pod", name, "-n", ns)["spec"].get("nodeName"),
            f"{ns}/{name} bound",
            timeout=60,
        )
        verdict = wait_admitted_or_refused(kubectl, ns, name, timeout=120)
    except TimeoutError as exc:  # recorded as seen; the comparison at the end fails on it
        verdict = ("", f"no verdict: {exc}")
    status = kubectl.json("get", "pod", name, "-n", ns)["status"]
    given = _given(record, ns, name) if verdict[0] == "Running" else {}
    kubectl.run("delete", "pod", name, "-n", ns, "--grace-period=1", "--wait=true", timeout=120)
    outcome = verdict[0] if verdict[0] == "Running" else verdict[1] or phase(kubectl, ns, name)[1]
    return {
        "outcome": outcome,
        "message": status.get("message", "")[:200],
        "numa": given,
        "explain": said,
    }


def _observe(cluster: Cluster, kubectl: Kubectl, ns: str, tmp: Path, node: str) -> dict[str, Any]:
    machine, fields, pods = CASES[node]
    sysfs = machines.build(machine, tmp / node / "sys")
    config = tmp / node / "kubelet.json"
    config.write_text(json.dumps(fields))
    added = cluster_cli("add-node", node, "--sysfs", str(sysfs), "--kubelet-config", str(config))
    if added.returncode != 0:
        cluster_cli("remove-node", node)
        return {"start": _start_reason(added.stderr)}
    seen: dict[str, Any] = {"start": "ok"}
    try:
        record = load(cluster.state).nodes[node]
        memory = _memory_numa(Path(record["kubelet_root"]))
        if memory is not None:
            seen["memory_numa"] = memory
        seen["pods"] = {p: _try(cluster, kubectl, ns, tmp, node, p, record) for p in pods}
    finally:
        cluster_cli("remove-node", node)
    return seen


@pytest.fixture
def ml_namespace(kubectl: Kubectl) -> Iterator[str]:
    name = f"ml-e2e-grace-{secrets.token_hex(3)}"
    kubectl("create", "namespace", name)
    procs.wait_for(
        lambda: kubectl.run("get", "sa", "default", "-n", name, check=False).returncode == 0,
        f"serviceaccount default in {name}",
    )
    yield name
    kubectl.run("delete", "namespace", name, "--wait=false", check=False)


def test_kubelets_on_cpu_less_numa_nodes(
    cluster: Cluster, kubectl: Kubectl, ml_namespace: str, tmp_path: Path
) -> None:
    seen: dict[str, Any] = {}
    for node in CASES:  # each case recorded as soon as it is seen
        seen[node] = _observe(cluster, kubectl, ml_namespace, tmp_path, node)
        text = json.dumps(seen, indent=2, sort_keys=True)
        if os.environ.get("TOPOPLACE_E2E_RECORD"):
            Path(os.environ["TOPOPLACE_E2E_RECORD"]).write_text(text + "\n")
    print(text)
    outcomes = {
        node: {k: v for k, v in s.items() if k != "pods"}
        | ({"pods": {p: r["outcome"] for p, r in s["pods"].items()}} if "pods" in s else {})
        for node, s in seen.items()
    }
    assert outcomes == EXPECTED
    # explain's verdict, asked before each pod existed, is the kubelet's outcome.
    disagree = {
        (node, p): (r["explain"], r["outcome"])
        for node, s in seen.items()
        for p, r in s.get("pods", {}).items()
        if (r["explain"] == "fits") != (r["outcome"] == "Running")
    }
    assert disagree == {}
