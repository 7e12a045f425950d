"""`make cluster`'s install back after a Helm release that adopted it was uninstalled.

Uninstalling deletes the Deployments and the DaemonSet, so their pods. This applies the
kustomize overlay again and waits, as `make cluster` does, until the kubelets run the new pods
Ready; the cluster record is refreshed for the scenarios after.
"""

from __future__ import annotations

from collections.abc import Callable

from e2e import procs
from e2e.kube import Kubectl
from e2e.state import Cluster, load
from e2e.topoplace import install as harness

__all__ = ["APPS", "our_pods", "reinstall"]

NAMESPACE = harness.NAMESPACE
# The workloads of the chart, whose pods an uninstall deletes.
APPS = ("topoplace-webhook", "topoplace-claim-templates", "topoplace-agent")

Say = Callable[[str], None]


def our_pods(kubectl: Kubectl) -> list[str]:
    """Names of the pods of APPS in the namespace, deleting ones included."""
    selector = f"app.kubernetes.io/name in ({','.join(APPS)})"
    pods = kubectl.json("get", "pods", "-n", NAMESPACE, "-l", selector)
    return sorted(p["metadata"]["name"] for p in pods["items"])


def reinstall(cluster: Cluster, say: Say) -> None:
    """Apply the kustomize install again and wait until Topoplace runs as before."""
    fresh = load(cluster.state)  # nodes added since the session started are in here
    # New pods only: nothing may wait on a pod that is about to go.
    procs.wait_for(
        lambda: not our_pods(fresh.kubectl), "the uninstalled release's pods gone", timeout=120
    )
    harness.install(fresh.kubectl, say)
    running = harness.wait_running(fresh.kubectl, list(fresh.nodes), say)
    for node, url in running["agent_metrics"].items():
        fresh.nodes[node]["agent_metrics"] = url
    fresh.save()
    cluster.info.update(fresh.info)  # the session's record too
