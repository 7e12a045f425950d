"""kube-scheduler's extender protocol (k8s.io/kube-scheduler/extender/v1), pure.

The Go types carry no JSON tags, so the wire names are the Go field names: ExtenderArgs
`{"Pod", "Nodes", "NodeNames"}`, ExtenderFilterResult `{"NodeNames", "FailedNodes",
"FailedAndUnresolvableNodes", "Error"}`, HostPriority `{"Host", "Score"}` with scores
0..10. Go decodes field names case-insensitively, so lower-case keys are read too.

Topoplace's extender is `nodeCacheCapable: true`: kube-scheduler sends node names only (the
NUMA zones come from the NodeResourceTopology watch, not from the Node objects) and reads
`NodeNames` back. A node with no NodeResourceTopology passes the filter and scores 0: the
extender knows nothing against it, and the stock checks still apply.

Each verdict is the kubelet's own: the NUMA set the model picks is the one the kubelet picks
(the lowest-numbered of the equally narrow preferred sets), so the score and the ledger's
prediction (accounting.py) both follow where the kubelet will put the pod, and a burst fills
NUMA nodes in the order the kubelet fills them.

Alike nodes are judged once per request: nodes whose NUMA zones hold the same counts under the
same policy and scope get the same verdict, and the NodeResourceTopology cache hands them one
shared zones tuple (nrt_cache.py), so a fleet of a few machine classes costs a few fits and
a dictionary look-up per node, not one Topology Manager model run per node.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from webhook.placement_model.free_now import FreeFit, free_fit
from webhook.placement_model.kubelet_admission import PodUnits, pod_units
from webhook.placement_model.zones import NodeZones, Zone

__all__ = [
    "MAX_SCORE",
    "BadArgs",
    "ExtenderArgs",
    "filter_nodes",
    "parse_args",
    "prioritize",
    "score",
]

MAX_SCORE = 10  # extenderv1.MaxExtenderPriority
ZonesOf = Callable[[str], NodeZones | None]
StaleOf = Callable[[str], str | None]


class BadArgs(ValueError):
    """The body is not an ExtenderArgs: answered HTTP 400 with this message."""


@dataclass(frozen=True, slots=True)
class ExtenderArgs:
    pod: Mapping[str, Any]
    nodes: tuple[str, ...]

    @property
    def uid(self) -> str:
        return str((self.pod.get("metadata") or {}).get("uid") or "")


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
    if not isinstance(names, list) or not set(map(type, names)) <= {str}:  # in C: 5,000 names
        raise BadArgs("NodeNames: expected a list of node names")
    return ExtenderArgs(pod, tuple(names))


def _verdicts(
    names: Iterable[str],
    zones_of: ZonesOf,
    units: PodUnits,
    overlay: Mapping[str, NodeZones] | None = None,
    classes: Mapping[str, Hashable] | None = None,
) -> Iterator[tuple[str, FreeFit | None]]:
    """Each node's verdict (None: no NodeResourceTopology), judged once per group of alike
    nodes. `overlay`: nodes whose zones differ from `zones_of`'s (the ledger's), looked up
    first. `classes`: each node's class key as the cache keeps it, so the hot loop of a
    5,000-name call is a dictionary look-up or two per node, no call of ours and nothing
    allocated; without it the key is made here. The memo holds the zones tuple it keys by
    id, so no id is reused meanwhile."""
    memo: dict[Hashable, tuple[tuple[Zone, ...], FreeFit]] = {}
    first = overlay.get if overlay else None
    class_of = classes.get if classes is not None else None
    for name in names:
        zones = first(name) if first is not None else None
        if zones is None and class_of is not None:
            key = class_of(name)
            if key is None:
                yield name, None
                continue
            known = memo.get(key)
            if known is None:
                zones = zones_of(name)
                if zones is None:  # `classes` and `zones_of` disagree: judged as unknown
                    yield name, None
                    continue
                known = memo[key] = (zones.zones, free_fit(zones, units))
            yield name, known[1]
            continue
        if zones is None:
            zones = zones_of(name)
            if zones is None:
                yield name, None
                continue
        key = (id(zones.zones), zones.policy, zones.scope)
        known = memo.get(key)
        if known is None:
            known = memo[key] = (zones.zones, free_fit(zones, units))
        yield name, known[1]


def filter_nodes(
    args: ExtenderArgs,
    zones_of: ZonesOf,
    stale: StaleOf = lambda _node: None,
    overlay: Mapping[str, NodeZones] | None = None,
    classes: Mapping[str, Hashable] | None = None,
) -> dict[str, Any]:
    """ExtenderFilterResult: the nodes whose NUMA nodes hold the pod now, and why not the rest
    (with why the node's object is out of date, when it is).

    Failed nodes go to FailedNodes, not FailedAndUnresolvableNodes: evicting a lower-priority
    pod frees GPUs, so preemption can help.
    """
    passed: list[str] = []
    failed: dict[str, str] = {}
    keep = passed.append
    units = pod_units(args.pod["spec"])
    for name, verdict in _verdicts(args.nodes, zones_of, units, overlay, classes):
        if verdict is None or verdict.fits:
            keep(name)
        else:
            reason = verdict.reason or "no NUMA node has room"
            late = stale(name)
            failed[name] = f"{reason}; {late}" if late else reason
    return {"NodeNames": passed, "FailedNodes": failed, "Error": ""}


def prioritize(
    args: ExtenderArgs,
    zones_of: ZonesOf,
    overlay: Mapping[str, NodeZones] | None = None,
    classes: Mapping[str, Hashable] | None = None,
) -> list[dict[str, Any]]:
    """HostPriorityList: the tightest fit scores highest, so whole NUMA nodes stay free for
    the pods that need them."""
    scores: dict[int, int] = {}  # id of a (shared) verdict -> its score: one per class
    out = []
    units = pod_units(args.pod["spec"])
    for name, verdict in _verdicts(args.nodes, zones_of, units, overlay, classes):
        known = scores.get(id(verdict))
        if known is None:
            known = scores[id(verdict)] = score(verdict)
        out.append({"Host": name, "Score": known})
    return out


def score(verdict: FreeFit | None) -> int:
    """0..10 from the share of the free GPUs of the NUMA set the kubelet will pick that the
    pod takes (not the tightest set: the kubelet takes the lowest-numbered that holds it, so
    a node is scored on what will happen there). Halves round up, never to even: 0.25 and
    0.35 are 3 and 4. 0 without a NodeResourceTopology or room."""
    if verdict is None or not verdict.fits:
        return 0
    return min(MAX_SCORE, int(MAX_SCORE * verdict.tightness + 0.5))
