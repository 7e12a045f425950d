"""What `explain --kubeconfig` (and `spans`, `validate`, `kueue-topology` through fleet.py)
read from a live cluster, with the user's own credentials.

Nodes, the pods bound to each node (their requests are already taken: the scheduler counts
every pod that is not Succeeded or Failed), and, when no --policies directory is given, the
policies the webhook serves (ConfigMap topoplace-system/topoplace-policies). Not a
subcommand, and never run by the webhook's ServiceAccount.
"""

from __future__ import annotations

import asyncio
import os
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from common.node_resource_topology import GROUP, PLURAL, VERSION
from webhook.nodefit.node_verdict import with_usage
from webhook.placement_model.filters.nodes import NodeView, node_views, used_by_node
from webhook.placement_model.requests import pod_requests
from webhook.placement_model.zones import NodeZones, zones_of_documents
from webhook.policy.loader import PolicySet, load_policy_dir
from webhook.spans.workloads import PLACED_SELECTOR, placed_on

__all__ = ["ClusterView", "context_namespace", "default_kubeconfig", "read_cluster"]


@dataclass(frozen=True, slots=True)
class ClusterView:
    nodes: list[NodeView]
    policies: PolicySet | None  # None when a --policies directory was given instead
    namespace: str | None  # the kubeconfig context's namespace, if it names one
    zones: dict[str, NodeZones] = field(default_factory=dict)  # NodeResourceTopology by node
    pods: list[dict[str, Any]] = field(default_factory=list)  # placed on the nodes, as listed


async def read_cluster(
    kubeconfig: Path | None, *, policies_configmap: str | None, leave_out: str | None = None
) -> ClusterView:
    """`leave_out`: the uid of a pod whose own requests its node does not count (the pod
    being explained)."""
    from kubernetes_asyncio import client

    from common.kube_config import load_configuration
    from webhook.kube_read import ApiError, list_all, read_json

    if kubeconfig is None and not os.environ.get("KUBERNETES_SERVICE_HOST"):
        # Read $KUBECONFIG now: the client library reads it once, when first imported.
        kubeconfig = default_kubeconfig()
    cfg = await load_configuration(kubeconfig)
    async with client.ApiClient(cfg) as api:
        core = client.CoreV1Api(api)

        async def zones_listed() -> list[dict[str, Any]]:
            try:
                listed, _ = await list_all(
                    client.CustomObjectsApi(api).list_cluster_custom_object,
                    group=GROUP,
                    version=VERSION,
                    plural=PLURAL,
                    resource_version="0",
                )
            except ApiError as exc:
                if exc.status not in (403, 404):  # no CRD, or not ours to read: hardware only
                    raise
                return []
            return listed

        # At once, and from the API server's watch cache (resourceVersion 0: no quorum read of
        # etcd, one page): at fleet size each list is seconds of the API server's time. A
        # diagnosis may be a moment behind; the webhook's own caches list as before.
        (raw_nodes, _), (raw_pods, _), raw_zones = await asyncio.gather(
            list_all(core.list_node, resource_version="0"),
            list_all(
                core.list_pod_for_all_namespaces,
                field_selector=PLACED_SELECTOR,
                resource_version="0",
            ),
            zones_listed(),
        )
        policies = None
        if policies_configmap is not None:
            namespace, _, name = policies_configmap.rpartition("/")
            doc = await read_json(
                await core.read_namespaced_config_map(
                    name, namespace or "topoplace-system", _preload_content=False
                )
            )
            policies = _policies_from(doc.get("data") or {})
    usage = used_by_node(
        (node, pod_requests(p.get("spec") or {}))
        for p in raw_pods
        if (node := placed_on(p)) and (p.get("metadata") or {}).get("uid") != leave_out
    )
    nodes = with_usage(node_views({**n, "kind": "Node"} for n in raw_nodes), usage)
    zones = zones_of_documents(raw_zones)
    return ClusterView(nodes, policies, context_namespace(kubeconfig), zones, raw_pods)


def _policies_from(data: dict[str, Any]) -> PolicySet:
    """Load the ConfigMap's files exactly as the webhook loads its mounted directory."""
    with tempfile.TemporaryDirectory(prefix="topoplace-policies-") as tmp:
        for name, text in data.items():
            if "/" not in name and isinstance(text, str):
                (Path(tmp) / name).write_text(text, "utf-8")
        return load_policy_dir(Path(tmp))


def default_kubeconfig() -> Path:
    """kubectl's choice: the first file of $KUBECONFIG, else ~/.kube/config."""
    first = (os.environ.get("KUBECONFIG") or "").split(os.pathsep)[0]
    return Path(first or "~/.kube/config").expanduser()


def context_namespace(kubeconfig: Path | None) -> str | None:
    """The current context's namespace, as kubectl would default it."""
    from common.yaml_input import CONFIG, YamlInputError, load_documents, read_text

    path = kubeconfig or default_kubeconfig()
    try:
        docs = load_documents(read_text(path, bounds=CONFIG), source=str(path), bounds=CONFIG)
        doc = docs[0] if docs else {}
        current = doc.get("current-context")
        for ctx in doc.get("contexts") or []:
            if ctx.get("name") == current:
                return (ctx.get("context") or {}).get("namespace") or None
    except (OSError, YamlInputError, AttributeError):
        return None
    return None
