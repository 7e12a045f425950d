"""`explain --kubeconfig` against the real cluster agrees with the real kube-scheduler: the
node a pod is bound to is among those explain says fit, a pod explain says fits nowhere stays
Pending, and `kubectl apply` shows the webhook's no-fit warning."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from e2e import procs
from e2e.cluster import Cluster
from e2e.kube import Kubectl
from tests.e2e.helpers import events, explain, training_pod, wait_bound


@pytest.mark.parametrize(
    ("policy", "gpus"),
    # single-numa-partial asks 96Gi per GPU: 2 GPUs fit no NUMA node (125 GiB) of the only
    # single-numa-node machine (test_placement.py); 1 fits.
    [("ddp-hgx-full-node", 8), ("single-numa-partial", 1), ("inference", 1)],
)
def test_the_scheduler_binds_where_explain_says_the_pod_fits(
    cluster: Cluster,
    kubectl: Kubectl,
    namespace: str,
    create: Callable[..., Any],
    tmp_path: Path,
    policy: str,
    gpus: int,
) -> None:
    obj = training_pod(f"{policy}-{gpus}", policy, gpus)
    fits = {n["node"] for n in explain(cluster, obj, namespace, tmp_path)["nodes"] if n["fits"]}
    assert fits, f"explain finds no node for {policy} with {gpus} GPUs"
    create(obj, namespace)
    assert wait_bound(kubectl, namespace, obj["metadata"]["name"]) in fits


def test_a_pod_explain_places_nowhere_stays_pending_and_apply_warns(
    cluster: Cluster, kubectl: Kubectl, namespace: str, tmp_path: Path
) -> None:
    obj = training_pod("nowhere", "single-numa-partial", 4)
    result = explain(cluster, obj, namespace, tmp_path)
    assert not any(n["fits"] for n in result["nodes"])
    assert all(n["reason"] for n in result["nodes"])
    applied = kubectl.run("apply", "-n", namespace, "-f", "-", input=json.dumps(obj))
    assert "no node fits placement policy single-numa-partial" in applied.stderr, applied.stderr
    assert "kubectl topoplace explain" in applied.stderr, applied.stderr
    procs.wait_for(
        lambda: events(kubectl, namespace, "nowhere", "FailedScheduling"),
        "a FailedScheduling event for pod nowhere",
    )
    assert kubectl.json("get", "pod", "nowhere", "-n", namespace)["spec"].get("nodeName") is None
