"""kube-scheduler's extender protocol (k8s.io/kube-scheduler/extender/v1), pure.

The Go types carry no JSON tags, so the wire names are the Go field names: ExtenderArgs
`{"Pod", "Nodes", "NodeNames"}`, ExtenderFilterResult `{"NodeNames", "FailedNodes",
"FailedAndUnresolvableNodes", "Error"}`, HostPriority `{"Host", "Score"}` with scores
0..10. Go decodes field names case-insensitively, so lower-case keys are read too.

Topoplace's extender is `nodeCacheCapable: true`: kube-scheduler sends node names only (the
NUMA zones come from the NodeResourceTopology watch, not from the Node objects) and reads
`NodeNames` back. A node with no NodeResourceTopology passes the filter and scores 0: the
extender knows nothing against it, and the stock checks still apply.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from webhook.topology.admission import pod_units
from webhook.topology.fit import FreeFit, free_fit
from webhook.topology.zones import NodeZones

__all__ = ["MAX_SCORE", "BadArgs", "ExtenderArgs", "filter_nodes", "parse_args", "prioritize"]

MAX_SCORE = 10  # extenderv1.MaxExtenderPriority
ZonesOf = Callable[[str], NodeZones | None]


class BadArgs(ValueError):
    """The body is not an ExtenderArgs: answered HTTP 400 with this message."""


@dataclass(frozen=True, slots=True)
class ExtenderArgs:
    pod: Mapping[str, Any]
    nodes: tuple[str, ...]


def _field(doc: Mapping[str, Any], name: str) -> Any:
    if name in doc:
        return doc[name]
    lowered = name.lower()
    return next((v for k, v in doc.items() if k.lower() == lowered), None)


def parse_args(doc: Any) -> ExtenderArgs:
    """ExtenderArgs from its JSON; node names from NodeNames, else from Nodes.items."""
    if not isinstance(doc, Mapping):
        raise BadArgs("expected a JSON object (ExtenderArgs)")
    pod = _field(doc, "Pod")
    if not isinstance(pod, Mapping) or not isinstance(pod.get("spec"), Mapping):
        raise BadArgs("Pod: expected a Pod with a spec")
    names = _field(doc, "NodeNames")
    if names is None:
        items = (_field(doc, "Nodes") or {}).get("items") or []
        names = [(n.get("metadata") or {}).get("name") for n in items if isinstance(n, Mapping)]
    if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
        raise BadArgs("NodeNames: expected a list of node names")
    return ExtenderArgs(pod, tuple(names))


def filter_nodes(args: ExtenderArgs, zones_of: ZonesOf) -> dict[str, Any]:
    """ExtenderFilterResult: the nodes whose NUMA nodes hold the pod now, and why not the rest.

    Failed nodes go to FailedNodes, not FailedAndUnresolvableNodes: evicting a lower-priority
    pod frees GPUs, so preemption can help.
    """
    units = pod_units(args.pod["spec"])
    passed: list[str] = []
    failed: dict[str, str] = {}
    for name in args.nodes:
        zones = zones_of(name)
        verdict = free_fit(zones, units) if zones is not None else FreeFit(True)
        if verdict.fits:
            passed.append(name)
        else:
            failed[name] = verdict.reason or "no NUMA node has room"
    return {"NodeNames": passed, "FailedNodes": failed, "Error": ""}


def prioritize(args: ExtenderArgs, zones_of: ZonesOf) -> list[dict[str, Any]]:
    """HostPriorityList: the tightest fit scores highest, so whole NUMA nodes stay free for
    the pods that need them."""
    units = pod_units(args.pod["spec"])
    out = []
    for name in args.nodes:
        zones = zones_of(name)
        score = 0
        if zones is not None:
            verdict = free_fit(zones, units)
            if verdict.fits:
                score = round(MAX_SCORE * verdict.tightness)
        out.append({"Host": name, "Score": score})
    return out
