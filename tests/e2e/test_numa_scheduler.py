"""The incident of issue 23 on real kubelets: NUMA-blind scheduling of a 4-GPU
`single-numa-node` pod onto a node with 2 + 2 GPUs free, and `topoplace-numa-scheduler`
(placement.numaAwareScheduler) avoiding it.

Two DGX H100s are added whose kubelets run `single-numa-node` (the default fleet's DGX H100s
run `restricted`): `numa-frag` is left with 2 GPUs free on each NUMA node, `numa-whole` with
4 free on one, by 1-GPU pods. The kubelet gives a 1-GPU pod a GPU of the lowest NUMA node
with one free; the object the agent publishes is checked after each step, never assumed.
"""

from __future__ import annotations

import json
import secrets
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import pytest

from e2e import procs
from e2e.cluster import Cluster, load
from e2e.kube import Kubectl
from tests.agent.discovery import machines
from tests.e2e.helpers import cluster_cli, events, patch_policies, training_pod
from tests.e2e.nrt_truth import kubelet_free, plain_pod, published

FRAG, WHOLE = "numa-frag", "numa-whole"
SCHEDULER = "topoplace-numa-scheduler"
TRIES = 20
POLICIES = f"""\
apiVersion: topoplace.io/v1alpha1
kind: PlacementPolicy
metadata:
  name: numa-blind
spec:
  placement:
    singleNumaNode: true
    topologyManagerPolicies: [single-numa-node]
  resources:
    guaranteed: false
---
apiVersion: topoplace.io/v1alpha1
kind: PlacementPolicy
metadata:
  name: numa-aware
spec:
  placement:
    singleNumaNode: true
    topologyManagerPolicies: [single-numa-node]
    numaAwareScheduler: {SCHEDULER}
  resources:
    guaranteed: false
"""


def free_gpus(kubectl: Kubectl, node: str) -> tuple[int, ...] | None:
    zones = published(kubectl, node)
    return tuple(z["nvidia.com/gpu"] for _, z in sorted(zones.items())) if zones else None


def wait_free(cluster: Cluster, kubectl: Kubectl, node: str, want: tuple[int, ...]) -> None:
    """Until the published object shows `want` GPUs free per NUMA node, as the kubelet's
    PodResources does (so the extender, reading the same object, sees it too). GPUs only:
    these kubelets run no static CPU manager, so PodResources lists no CPUs to compare."""
    added = load(cluster.state)  # the session's record predates add-node

    def kubelet_gpus() -> tuple[int, ...]:
        free = kubelet_free(added, node)
        return tuple(z.get("nvidia.com/gpu", 0) for _, z in sorted(free.items()))

    procs.wait_for(
        lambda: free_gpus(kubectl, node) == want == kubelet_gpus(),
        f"NodeResourceTopology {node} with {want} GPUs free",
        timeout=30,
    )


def run(kubectl: Kubectl, ns: str, name: str) -> None:
    procs.wait_for(
        lambda: kubectl.json("get", "pod", name, "-n", ns)["status"].get("phase") == "Running",
        f"{ns}/{name} Running",
    )


def delete(kubectl: Kubectl, ns: str, *names: str) -> None:
    kubectl.run("delete", "pod", *names, "-n", ns, "--grace-period=1", "--wait=true", timeout=120)


def four_gpu_pod(name: str, policy: str) -> dict[str, Any]:
    pod = training_pod(name, policy, 4)
    pod["spec"]["terminationGracePeriodSeconds"] = 1
    term = {"matchExpressions": [
        {"key": "kubernetes.io/hostname", "operator": "In", "values": [FRAG, WHOLE]}
    ]}  # fmt: skip
    pod["spec"]["affinity"] = {
        "nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
            "nodeSelectorTerms": [term]
        }}
    }  # fmt: skip
    return pod


def outcome(kubectl: Kubectl, ns: str, name: str) -> tuple[str, str, str]:
    """(node, phase, reason) once the kubelet ran or refused the pod."""

    def settled() -> tuple[str, str, str] | None:
        pod = kubectl.json("get", "pod", name, "-n", ns)
        status, node = pod["status"], pod["spec"].get("nodeName", "")
        if node and status.get("phase") in ("Running", "Failed"):
            return node, status["phase"], status.get("reason", "")
        return None

    return procs.wait_for(settled, f"{ns}/{name} bound and run or refused", timeout=60)


def create(kubectl: Kubectl, obj: dict[str, Any], ns: str) -> str:
    """kubectl create; its stderr (the admission warnings)."""
    done = kubectl.run("create", "-n", ns, "-f", "-", input=json.dumps(obj))
    return done.stderr


@pytest.fixture(scope="module")
def fleet(
    cluster: Cluster, kubectl: Kubectl, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[str]:
    """The two nodes, filled; the namespace of the fillers and the policies."""
    tmp = tmp_path_factory.mktemp("numa")
    config = tmp / "kubelet.yaml"
    config.write_text("topologyManagerPolicy: single-numa-node\ntopologyManagerScope: container\n")
    sysfs = machines.build("dgx-h100", tmp / "sys")
    added = []
    ns = f"ml-e2e-numa-{secrets.token_hex(3)}"
    try:
        for node in (FRAG, WHOLE):
            done = cluster_cli(
                "add-node", node, "--sysfs", str(sysfs), "--memory", "2063937144Ki",
                "--kubelet-config", str(config),
            )  # fmt: skip
            assert done.returncode == 0, done.stdout + done.stderr
            added.append(node)
        kubectl("create", "namespace", ns)
        procs.wait_for(
            lambda: kubectl.run("get", "sa", "default", "-n", ns, check=False).returncode == 0,
            f"serviceaccount default in {ns}",
        )
        patch_policies(kubectl, {"numa-e2e.yaml": POLICIES})
        fillers = {WHOLE: 4, FRAG: 6}  # one at a time, each on the lowest NUMA node with room
        # The whole node's small jobs hold more CPUs: kube-scheduler's own scoring (least
        # allocated) then prefers the fragmented node, as in the incident, every time.
        cpus = {WHOLE: 8, FRAG: 1}
        for node, count in fillers.items():
            for i in range(count):
                create(kubectl, plain_pod(f"{node}-{i}", node, gpus=1, cpus=cpus[node]), ns)
                run(kubectl, ns, f"{node}-{i}")
        wait_free(cluster, kubectl, WHOLE, (0, 4))
        wait_free(cluster, kubectl, FRAG, (0, 2))
        delete(kubectl, ns, f"{FRAG}-0", f"{FRAG}-1")  # two of NUMA node 0's four
        wait_free(cluster, kubectl, FRAG, (2, 2))
        yield ns
    finally:
        kubectl.run("delete", "namespace", ns, "--wait=false", check=False)
        patch_policies(kubectl, {"numa-e2e.yaml": None}, wait=False)
        for node in added:
            cluster_cli("remove-node", node)


def test_the_default_scheduler_binds_to_the_fragmented_node_and_the_kubelet_refuses(
    cluster: Cluster, kubectl: Kubectl, fleet: str
) -> None:
    seen: list[tuple[str, str, str]] = []
    for i in range(TRIES):
        name = f"blind-{i}"
        create(kubectl, four_gpu_pod(name, "numa-blind"), fleet)
        seen.append(outcome(kubectl, fleet, name))
        delete(kubectl, fleet, name)
        if seen[-1][0] == FRAG:
            break
        wait_free(cluster, kubectl, WHOLE, (0, 4))
    print(f"\ndefault scheduler, {len(seen)} tries: {seen}")
    # kube-scheduler counted 4 free GPUs on both; the kubelet of the fragmented one refused.
    assert (FRAG, "Failed", "TopologyAffinityError") in seen
    assert all(s == (WHOLE, "Running", "") or s[0] == FRAG for s in seen)


def test_the_numa_aware_scheduler_picks_the_whole_numa_node_every_time(
    cluster: Cluster, kubectl: Kubectl, fleet: str
) -> None:
    for i in range(TRIES):
        name = f"aware-{i}"
        warnings = create(kubectl, four_gpu_pod(name, "numa-aware"), fleet)
        assert "is not running" not in warnings, warnings  # its Lease is fresh
        pod = kubectl.json("get", "pod", name, "-n", fleet)
        assert pod["spec"]["schedulerName"] == SCHEDULER  # set by the webhook
        assert outcome(kubectl, fleet, name) == (WHOLE, "Running", ""), f"try {i + 1}"
        delete(kubectl, fleet, name)
        wait_free(cluster, kubectl, WHOLE, (0, 4))


def test_no_room_stays_pending_and_starts_once_a_numa_node_frees(
    cluster: Cluster, kubectl: Kubectl, fleet: str
) -> None:
    create(kubectl, plain_pod("whole-extra", WHOLE, gpus=1), fleet)
    run(kubectl, fleet, "whole-extra")
    wait_free(cluster, kubectl, WHOLE, (0, 3))
    warnings = create(kubectl, four_gpu_pod("waits", "numa-aware"), fleet)
    assert "none of the 2 matching nodes has room on one NUMA node now" in warnings, warnings
    failed = procs.wait_for(
        lambda: events(kubectl, fleet, "waits", "FailedScheduling"),
        "the NUMA-aware scheduler turning the pod away",
    )
    message = failed[-1]["message"]
    # 3 GPUs free in all: kube-scheduler's own count turns numa-whole away first; 4 free but
    # 2 + 2: only the extender sees that numa-frag has no room.
    assert "1 Insufficient nvidia.com/gpu" in message, message
    assert "1 no NUMA node has 4 free GPUs (free: 2, 2)" in message, message
    pod = kubectl.json("get", "pod", "waits", "-n", fleet)
    assert pod["status"]["phase"] == "Pending" and not pod["spec"].get("nodeName")

    deleted = time.monotonic()
    delete(kubectl, fleet, "whole-extra")
    assert outcome(kubectl, fleet, "waits") == (WHOLE, "Running", "")
    print(f"\nPending pod running {time.monotonic() - deleted:.1f} s after the 1-GPU pod's delete")
    delete(kubectl, fleet, "waits")
    wait_free(cluster, kubectl, WHOLE, (0, 4))


def test_a_policy_naming_a_scheduler_that_is_not_running_is_warned(
    kubectl: Kubectl, fleet: str
) -> None:
    ghost = (
        POLICIES.split("---\n")[1]
        .replace("numa-aware", "numa-ghost")
        .replace(SCHEDULER, "no-such-scheduler")
    )
    patch_policies(kubectl, {"numa-ghost.yaml": ghost})
    try:
        pod = four_gpu_pod("ghost", "numa-ghost")

        def warned() -> str | None:
            done = kubectl.run(
                "create", "-n", fleet, "-f", "-", "--dry-run=server", input=json.dumps(pod)
            )
            return done.stderr if "is not running" in done.stderr else None

        # The webhook reads the named Lease every 10 s: the first pods may come before.
        stderr = procs.wait_for(warned, "the warning about no-such-scheduler", timeout=40)
        assert (
            "scheduler 'no-such-scheduler' is not running (no Lease kube-system/no-such-scheduler)"
        ) in stderr
    finally:
        patch_policies(kubectl, {"numa-ghost.yaml": None})


def test_the_scheduler_holds_its_lease(kubectl: Kubectl, fleet: str) -> None:
    lease = kubectl.json("get", "lease", SCHEDULER, "-n", "kube-system")
    assert lease["spec"]["holderIdentity"]
    renewed = datetime.fromisoformat(lease["spec"]["renewTime"].replace("Z", "+00:00"))
    assert (datetime.now(UTC) - renewed).total_seconds() < 3 * lease["spec"]["leaseDurationSeconds"]
