"""Proof against the real kubelet (issue 32): seeded random pods, each bound by nodeName to a
machine so that its kubelet alone admits or refuses it, judged beforehand by `explain` and by
the scheduler extender; every disagreement is a bug in our model of the kubelet. Then pods
mutated by policies that allow only `single-numa-node` or `restricted`, left to the default
scheduler: no kubelet may refuse one.

    pytest -m e2e -p no:cacheprovider tests/e2e/test_kubelet_truth_random.py \\
        [--cases N] [--truth-seed S] [--truth-case K ...]

Machines under five kubelet configurations: `restricted`/pod (the default DGX H100s, one left
fragmented by a holder pod), `single-numa-node`/pod (the default NPS4 DGX A100, fragmented),
`none` (the default L40S server), and, added here, `restricted`/container (a DGX H100),
`restricted`/pod on an NPS4 DGX A100 and `best-effort`/pod (an L40S), all three fragmented;
and machines with NUMA nodes without CPUs (issue 51): a GB200 tray in NUMA mode (34 NUMA
nodes, `restricted`/pod, `max-allowable-numa-nodes: 34`, no memory manager; fragmented), a
GH200 (9, the same with the Static memory manager; its Grace's memory partly pinned) and a
CXL server (3, `single-numa-node`/pod, Static memory manager).
"""

from __future__ import annotations

import secrets
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from e2e import procs
from e2e.cluster import Cluster
from e2e.kube import Kubectl
from tests.e2e.random_pods import draw, summary
from tests.e2e.truth_fleet import added_nodes, hold, shapes
from tests.e2e.truth_judges import Available
from tests.e2e.truth_policies import run_policy_pods
from tests.e2e.truth_rounds import run_rounds, table

SECONDS_PER_ROUND = 90  # a round's waits are bounded one by one; this bounds the whole run


@pytest.fixture(scope="module")
def fleet(cluster: Cluster, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    with added_nodes(cluster, tmp_path_factory.mktemp("truth-nodes")) as record:
        yield record


@pytest.fixture(scope="module")
def truth_ns(kubectl: Kubectl) -> Iterator[str]:
    name = f"ml-e2e-truth-{secrets.token_hex(3)}"  # ml-*: the shipped policies allow it
    kubectl("create", "namespace", name)
    procs.wait_for(
        lambda: kubectl.run("get", "sa", "default", "-n", name, check=False).returncode == 0,
        f"serviceaccount default in {name}",
    )
    yield name
    kubectl.run("delete", "pods", "--all", "-n", name, "--grace-period=1", check=False, timeout=120)
    kubectl.run("delete", "namespace", name, "--wait=false", check=False)


@pytest.fixture(scope="module")
def holder_states(fleet: Cluster, kubectl: Kubectl, truth_ns: str) -> dict[str, Available]:
    return hold(fleet, kubectl, truth_ns)


def test_policy_pods_are_never_refused_by_a_kubelet(
    fleet: Cluster, kubectl: Kubectl, truth_ns: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """Runs before the holders exist: a refusal here is the node's shape, not its load."""
    rows = run_policy_pods(fleet, kubectl, truth_ns)
    with capsys.disabled():
        print("\n" + "\n".join(r.line() for r in rows))
    assert len(rows) >= 16
    refused = [r.line() for r in rows if r.phase == "Failed"]
    assert not refused, "kubelets refused mutated pods:\n" + "\n".join(refused)
    assert any(r.phase == "Running" for r in rows), "no policy pod ran at all"


def test_explain_and_the_extender_agree_with_the_kubelet(
    request: pytest.FixtureRequest,
    fleet: Cluster,
    kubectl: Kubectl,
    truth_ns: str,
    holder_states: dict[str, Available],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    seed = request.config.getoption("--truth-seed")
    only = request.config.getoption("--truth-case")
    count = request.config.getoption("--cases")
    indexes = sorted(set(only)) if only else list(range(count))
    machines = shapes(kubectl)
    cases = [draw(seed, i, machines) for i in indexes]
    with capsys.disabled():
        print(f"\nkubelet truth: seed {seed}, cases {indexes[0]}..{indexes[-1]} ({len(cases)})")
    started = time.monotonic()
    per_node = max(sum(c.node == m.name for c in cases) for m in machines)
    rows = run_rounds(
        fleet,
        kubectl,
        truth_ns,
        cases,
        holder_states,
        tmp_path,
        deadline=started + 120 + SECONDS_PER_ROUND * per_node,
    )
    with capsys.disabled():
        print(table(rows, seed))
        print(f"wall time {time.monotonic() - started:.0f} s")
    wrong = [r for r in rows if not r.explain_agrees or r.extender_word == "DISAGREES"]
    replay = f"--truth-seed {seed} " + " ".join(f"--truth-case {r.case.index}" for r in wrong)
    details = "\n".join(
        f"case {r.case.index} on {r.case.node} ({r.config}): {summary(r.case.pod)}\n"
        f"  explain: {r.explain.word()} [{r.explain.detail}]\n"
        f"  extender: {r.extender.word()} ({r.extender_word})\n"
        f"  kubelet: {r.kubelet.word()} {r.kubelet.detail}"
        for r in wrong
    )
    assert not wrong, f"{len(wrong)} disagreements; replay with {replay}\n{details}"
    if not only:  # a sample that never saw both outcomes proves nothing
        assert {r.kubelet.fits for r in rows} == {True, False}
