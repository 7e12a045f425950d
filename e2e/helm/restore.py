"""`make cluster`'s install back after a Helm release that adopted it was uninstalled.

Uninstalling deletes the Deployments and the DaemonSet, so their pods, and with them the
tokens bound to those pods that the processes standing in for the pods use. This applies the
kustomize overlay again and starts those processes anew, with tokens bound to the new pods,
exactly as `make cluster` does; the cluster record is updated for the scenarios after.
"""

from __future__ import annotations

from collections.abc import Callable

from e2e import procs
from e2e.kube import Kubectl
from e2e.state import Cluster, load
from e2e.topoplace.install import (
    NAMESPACE,
    install,
    start_agents,
    start_claim_templates,
    start_webhook,
)

__all__ = ["APPS", "our_pods", "reinstall"]

# The workloads whose pods the harness stands in for.
APPS = ("topoplace-webhook", "topoplace-claim-templates", "topoplace-agent")
# Our processes, stopped in this order (the API's clients before the projector).
_PROCS = ("agent-", "claim-templates", "webhook-serve", "webhook-certs", "projector")


def our_pods(kubectl: Kubectl) -> list[str]:
    """Names of the pods of APPS in the namespace, deleting ones included."""
    selector = f"app.kubernetes.io/name in ({','.join(APPS)})"
    pods = kubectl.json("get", "pods", "-n", NAMESPACE, "-l", selector)
    return sorted(p["metadata"]["name"] for p in pods["items"])


def reinstall(cluster: Cluster, say: Callable[[str], None]) -> None:
    """Apply the kustomize install again and restart our processes against its new pods."""
    fresh = load(cluster.state)  # nodes added since the session started are in here
    names = [n for prefix in _PROCS for n in fresh.info["procs"] if n.startswith(prefix)]
    for name in names:
        procs.stop(fresh.state, name)
    # The new pods' tokens must not be bound to an old pod that is about to go.
    procs.wait_for(
        lambda: not our_pods(fresh.kubectl), "the uninstalled release's pods gone", timeout=120
    )
    cp, k = fresh.control_plane(), fresh.kubectl
    objects = install(k, say)
    started = start_webhook(cp, k, objects, say)
    started |= start_claim_templates(cp, k, objects, say)
    started |= start_agents(cp, k, objects, fresh.nodes, say)
    fresh.info["procs"].update(started)
    fresh.save()
    cluster.info.update(fresh.info)  # the session's record too
