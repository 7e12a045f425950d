"""Which placement warnings fire, in what order, and which facts are looked at for them (the
node cache's index is asked for the no-fit assessment only when nothing fits)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace

from tests.webhook.nodefit.test_index import POLICY_SET, gpu_pod
from tests.webhook.server.test_numa_scheduling import NUMA_POLICY
from webhook.engine.recipe import mutate
from webhook.nodefit.checks import PodPlan, plan_for
from webhook.nodefit.node_index import NodeIndex
from webhook.nodefit.node_masks import Assessment, Miss
from webhook.nodefit.pairs_check import PairsVerdict
from webhook.placement_model.filters.nodes import NodeView
from webhook.policy.loader import load_policy_dir
from webhook.policy.model import PlacementPolicy
from webhook.warnings.hardware import PairsGroup
from webhook.warnings.kinds import WarningKind, WarningLine
from webhook.warnings.now import NoRoom
from webhook.warnings.placement import PlacementWarnings, node_warnings

POLICY = POLICY_SET.get("ddp-hgx-full-node")  # asks for GPU↔NIC pairs
assert POLICY is not None
POD = mutate(gpu_pod("ddp-hgx-full-node", 8), "ml-team", POLICY_SET).pod
NOT_PAIRED = PairsVerdict(False, "device-plugin", "rdma/ib holds storage NICs", "use spec.dra")


@dataclass
class Facts:
    """Stand-in for the node cache's facts; records which were asked for."""

    fits: bool = True
    refusing: Sequence[str] = ()
    room: NoRoom | None = None
    groups: Sequence[PairsGroup] = ()
    total: int = 5
    asked: list[str] = field(default_factory=list)
    plan: PodPlan = field(default_factory=lambda: plan_for(POD, POLICY))
    policy: PlacementPolicy = POLICY

    def nodes(self) -> int:
        return self.total

    def fit(self) -> tuple[bool, Sequence[str]]:
        self.asked.append("fit")
        return self.fits, self.refusing

    def assessment(self) -> Assessment:
        self.asked.append("assessment")
        return Assessment(0, (Miss(self.plan.checks[0], self.total, ("2",)),))

    def no_room(self) -> NoRoom | None:
        self.asked.append("no_room")
        return self.room

    def pair_groups(self) -> Sequence[PairsGroup]:
        self.asked.append("pair_groups")
        return self.groups


def test_no_fit_alone_and_nothing_else_looked_at() -> None:
    facts = Facts(fits=False, refusing=["n1"], room=NoRoom(1, "n1", "full"))
    ((kind, warning),) = [(w.kind, w.line) for w in node_warnings(facts)]
    assert kind is WarningKind.NO_FIT
    assert warning.startswith("topoplace: no node fits placement policy ddp-hgx-full-node")
    assert facts.asked == ["fit", "assessment"]


def test_where_it_fits_refusal_then_room_then_pairs() -> None:
    facts = Facts(
        refusing=["n1", "n2"],
        room=NoRoom(3, "n3", "no NUMA node has 8 free GPUs (free: 4, 4)"),
        groups=[(NOT_PAIRED, 2, ["n4", "n5"])],
    )
    found = node_warnings(facts)
    assert [w.kind for w in found] == [
        WarningKind.KUBELET_REFUSAL,
        WarningKind.NO_ROOM,
        WarningKind.PAIRS,
    ]
    warnings = [w.line for w in found]
    assert all(w.startswith("topoplace: placement policy ddp-hgx-full-node") for w in warnings)
    assert "the kubelets of 2 matching nodes (n1, n2) would refuse" in warnings[0]
    assert "none of the 3 matching nodes has room on one NUMA node now (n3: " in warnings[1]
    assert "GPU↔NIC pairs not guaranteed on 2 of 2 nodes it fits (n4, n5)" in warnings[2]
    assert facts.asked == ["fit", "no_room", "pair_groups"]


def test_nothing_wrong_nothing_said_and_no_nodes_nothing_asked() -> None:
    assert node_warnings(Facts(groups=[(PairsVerdict(True, "DRA", "aligned"), 4, ["a"])])) == []
    facts = Facts(total=0)
    assert node_warnings(facts) == [] and facts.asked == []


def test_the_scheduler_comes_last_with_or_without_the_node_cache(tmp_path: Path) -> None:
    (tmp_path / "numa.yaml").write_text(NUMA_POLICY)
    policies = load_policy_dir(tmp_path)
    mutation = mutate(gpu_pod("numa", 2), "ml", policies)
    pod, policy = mutation.pod, mutation.applied
    assert policy is not None and pod["spec"]["schedulerName"] == "topoplace-numa-scheduler"
    problem = {"topoplace-numa-scheduler": "scheduler 'x' is not running (no Lease)"}.get
    # A node store with one node the agent never labelled: the pod fits no node.
    bare = {"metadata": {"name": "bare", "labels": {}}, "status": {"allocatable": {}}}
    store = SimpleNamespace(ready=True, index=NodeIndex([NodeView.from_object(bare)]))
    check = PlacementWarnings(nodes=store, scheduler_problem=problem)
    warned = check(pod, policy)
    assert [w.kind for w in warned] == [WarningKind.NO_FIT, WarningKind.SCHEDULER]
    assert warned[1] == WarningLine(
        WarningKind.SCHEDULER,
        "topoplace: scheduler 'x' is not running (no Lease): the pod stays Pending until it "
        "runs (placement.numaAwareScheduler)",
    )
    # The store not listed yet, or none: the scheduler's warning alone.
    cold = SimpleNamespace(ready=False, index=store.index)
    assert PlacementWarnings(nodes=cold, scheduler_problem=problem)(pod, policy) == warned[1:]
    assert PlacementWarnings(scheduler_problem=problem)(pod, policy) == warned[1:]
    assert PlacementWarnings(scheduler_problem=problem)({"spec": {}}, policy) == []
    assert check(pod, None) == []


def test_alike_pods_are_judged_once_per_node_change(tmp_path: Path) -> None:
    (tmp_path / "numa.yaml").write_text(NUMA_POLICY)
    mutation = mutate(gpu_pod("numa", 2), "ml", load_policy_dir(tmp_path))
    bare = {"metadata": {"name": "bare", "labels": {}}, "status": {"allocatable": {}}}
    store = SimpleNamespace(ready=True, index=NodeIndex([NodeView.from_object(bare)]))
    check = PlacementWarnings(nodes=store)
    first = check(mutation.pod, mutation.applied)
    assert [w.kind for w in first] == [WarningKind.NO_FIT]
    # The index moves (a node event): the verdict follows it at once.
    store.index.remove("bare")
    assert check(mutation.pod, mutation.applied) == []
