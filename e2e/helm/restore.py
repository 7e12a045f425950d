"""`make cluster`'s install back after a Helm release that adopted it was uninstalled.

Uninstalling deletes the Deployments and the DaemonSet, so their pods. This applies the
kustomize overlay again. Where the harness runs Topoplace's programs beside the kubelet-run
pods (e2e/topoplace/install.py's start_* functions), those processes hold tokens bound to
the deleted pods: they are started anew, with tokens bound to the new pods, exactly as
`make cluster` starts them, and the cluster record is updated for the scenarios after.
Where the kubelets run the pods themselves (the harness without start_*), applying again and
waiting for the pods is all there is to it.
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
# The processes standing in for those pods, stopped in this order (the projector last).
_PROCS = ("agent-", "claim-templates", "webhook-serve", "webhook-certs", "projector")

Say = Callable[[str], None]


def our_pods(kubectl: Kubectl) -> list[str]:
    """Names of the pods of APPS in the namespace, deleting ones included."""
    selector = f"app.kubernetes.io/name in ({','.join(APPS)})"
    pods = kubectl.json("get", "pods", "-n", NAMESPACE, "-l", selector)
    return sorted(p["metadata"]["name"] for p in pods["items"])


def reinstall(cluster: Cluster, say: Say) -> None:
    """Apply the kustomize install again and wait until Topoplace runs as before."""
    fresh = load(cluster.state)  # nodes added since the session started are in here
    stand_ins = hasattr(harness, "start_webhook")
    if stand_ins:
        names = [n for prefix in _PROCS for n in fresh.info["procs"] if n.startswith(prefix)]
        for name in names:
            procs.stop(fresh.state, name)
    # New pods only: nothing may bind to (or wait on) a pod that is about to go.
    procs.wait_for(
        lambda: not our_pods(fresh.kubectl), "the uninstalled release's pods gone", timeout=120
    )
    if stand_ins:
        _restart_stand_ins(fresh, say)
    else:
        harness.install(fresh.kubectl, say)
        harness.wait_running(fresh.kubectl, list(fresh.nodes), say)
    cluster.info.update(fresh.info)  # the session's record too


def _restart_stand_ins(fresh: Cluster, say: Say) -> None:
    cp, k = fresh.control_plane(), fresh.kubectl
    objects = harness.install(k, say)
    started = harness.start_webhook(cp, k, objects, say)
    started |= harness.start_claim_templates(cp, k, objects, say)
    started |= harness.start_agents(cp, k, objects, fresh.nodes, say)
    fresh.info["procs"].update(started)
    fresh.save()
