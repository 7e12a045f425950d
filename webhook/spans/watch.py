"""`serve --workload-spans`: the per-workload audit as metrics, kept from a pod list+watch.

Only pods that opted in (the policy label) and hold a place on a node are listed and
watched, and of each only its workload and node are kept. The spans are worked out at
scrape time from the node cache's labels, so a node relabelled moves its workloads' figures
at the next scrape without any pod event. Until both the first pod list and the node cache
are in, the families have no sample (absent, not zero: nothing is known yet).

Metrics (prefix `topoplace_webhook_workload_`), labelled by namespace, kind and workload: one
set per running Topoplace workload, gone when its last pod ends.
- `pods`, `nodes`: its placed pods and the nodes they are on;
- `domains{level}`: the domains it spans at a position level some of its nodes carry;
- `max_hops`: the most hops between two of its pods, absent while a pair is unknown;
- `unknown_hop_pairs`: pairs of its nodes that share no tier (or lack the labels).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any, Final

from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from common.backoff import Backoff, Sleep
from common.kube.listwatch import WATCH_SECONDS, ListWatch, Snapshot
from webhook.placement_model.span import span
from webhook.spans.workloads import PLACED_SELECTOR, WorkloadRef, by_workload, placement
from webhook.vocabulary import POLICY_LABEL

__all__ = ["WorkloadSpans"]

logger = logging.getLogger(__name__)

_PREFIX: Final = "topoplace_webhook_workload_"
_LABELS: Final = ("namespace", "kind", "workload")
NodeLabels = Callable[[], Mapping[str, Mapping[str, str]] | None]


def _key(obj: Mapping[str, Any]) -> str:
    meta = obj.get("metadata") or {}
    return str(meta.get("uid") or f"{meta.get('namespace')}/{meta.get('name')}")


class WorkloadSpans(Collector):
    """Placed Topoplace pods by workload; a prometheus_client collector of their spans."""

    def __init__(
        self,
        node_labels: NodeLabels,
        *,
        watch_seconds: int = WATCH_SECONDS,
        backoff: Backoff | None = None,
        sleep: Sleep = asyncio.sleep,
    ) -> None:
        self._node_labels = node_labels  # None until the node cache has listed
        self._pods: dict[str, tuple[WorkloadRef, str]] = {}
        self.ready = False
        self.lists = 0
        self.events = 0
        self._watch_seconds = watch_seconds
        self._backoff = backoff or Backoff()
        self._sleep = sleep

    def placed(self) -> dict[WorkloadRef, list[str]]:
        return by_workload(self._pods.values())

    # --- prometheus_client ---------------------------------------------------------------
    def describe(self) -> Iterator[Metric]:
        return iter(())  # unchecked collector: the series come and go with workloads

    def collect(self) -> Iterator[Metric]:
        labels = self._node_labels() if self.ready else None
        pods = GaugeMetricFamily(_PREFIX + "pods", "Placed pods of the workload", labels=_LABELS)
        nodes = GaugeMetricFamily(
            _PREFIX + "nodes", "Nodes the workload's pods are placed on", labels=_LABELS
        )
        domains = GaugeMetricFamily(
            _PREFIX + "domains",
            "Domains the workload's pods span at a position level",
            labels=(*_LABELS, "level"),
        )
        hops = GaugeMetricFamily(
            _PREFIX + "max_hops", "Most switch hops between two of its pods", labels=_LABELS
        )
        unknown = GaugeMetricFamily(
            _PREFIX + "unknown_hop_pairs",
            "Pairs of its nodes whose distance no network tier tells",
            labels=_LABELS,
        )
        if labels is None:  # not listed yet: the families without series
            yield from (pods, nodes, domains, hops, unknown)
            return
        for ref, placed in sorted(self.placed().items()):
            s = span(placed, labels)
            values = [ref.namespace, ref.kind, ref.name]
            pods.add_metric(values, s.pods)
            nodes.add_metric(values, s.nodes)
            for level, count in s.domains.items():
                if count:
                    domains.add_metric([*values, level], count)
            if s.max_hops is not None:
                hops.add_metric(values, s.max_hops)
            unknown.add_metric(values, s.unknown_pairs)
        yield from (pods, nodes, domains, hops, unknown)

    # --- the list+watch loop -------------------------------------------------------------
    async def run(self, kubeconfig: Path | None = None) -> None:
        """List and watch until cancelled."""
        from common.kube_config import follow_when_ready

        await follow_when_ready(
            kubeconfig,
            self.follow,
            api="CoreV1Api",
            what="workload spans",
            sleep=self._sleep,
            next_delay=self._backoff.next_delay,
        )

    async def follow(self, core: Any) -> None:
        await ListWatch(
            core.list_pod_for_all_namespaces,
            what="workload spans",
            params={"label_selector": POLICY_LABEL, "field_selector": PLACED_SELECTOR},
            on_list=self._listed,
            on_event=self._changed,
            backoff=self._backoff,
            sleep=self._sleep,
            watch_seconds=self._watch_seconds,
            log=logger,
        ).run()

    def _listed(self, snapshot: Snapshot) -> None:
        pods = {_key(item): p for item in snapshot.items if (p := placement(item)) is not None}
        self._pods = pods
        self.ready = True
        self.lists += 1
        logger.info(
            "workload spans: listed pods",
            extra={"pods": len(pods), "workloads": len({ref for ref, _ in pods.values()})},
        )

    def _changed(self, kind: str, obj: dict[str, Any]) -> None:
        placed = placement(obj)
        if kind == "DELETED" or placed is None:
            self._pods.pop(_key(obj), None)
        else:
            self._pods[_key(obj)] = placed
        self.events += 1
