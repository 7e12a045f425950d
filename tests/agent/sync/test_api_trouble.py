"""Labels follow the cache through API trouble (issue 17, part 2), on the real clock: the
server's Retry-After is obeyed exactly, and a dataset marker written while the API server
fails is labelled within 2 s of the API answering again. Real kubernetes-asyncio client,
real cache watcher, fake API server with planned faults."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from agent.discovery.discover import DiscoveryOptions
from common.backoff import Backoff, BackoffPolicy
from common.vocabulary import dataset_label
from tests.agent.sync.conftest import NODE
from tests.agent.sync.fake_apiserver import FakeApiServer, Fault
from tests.agent.sync.harness import ScriptedSleep, complete_version, running_agent, wait_until

KEY = dataset_label("imagenet")


def _first_ok_after(server: FakeApiServer, moment: float) -> float:
    return next(r.at for r in server.requests if r.status == 200 and r.at >= moment)


async def test_six_429s_with_retry_after_1_are_waited_exactly_and_converge_within_10s(
    apiserver: FakeApiServer, options: DiscoveryOptions, dataset_root: Path
) -> None:
    apiserver.add_node(NODE)
    async with running_agent(apiserver, node=NODE, options=options) as agent:
        await wait_until(lambda: agent.synced_count() >= 1, what="first sync")
        apiserver.faults.extend(Fault(429, retry_after="1") for _ in range(6))
        complete_version(dataset_root, "imagenet", "2024-06")
        await wait_until(lambda: apiserver.count("GET", answered=429) >= 1, what="first 429")
        first_fault = next(r.at for r in apiserver.requests if r.status == 429)
        labelled = await wait_until(
            lambda: apiserver.labels(NODE).get(KEY) == "2024-06",
            within=10,
            what="dataset label after six 429s",
        )

    assert labelled - first_fault <= 10.0, f"converged {labelled - first_fault:.2f}s after"

    failed = [e for e in agent.reconciles() if e.result == "api_error"]
    # Each wait is the server's one second: not stretched by six failures' worth of backoff.
    assert [(e.retry_after, e.next_in) for e in failed] == [(1.0, 1.0)] * 6
    assert [r.status for r in apiserver.requests if r.at >= first_fault] == [429] * 6 + [200] * 2


async def test_a_marker_written_during_a_long_backoff_is_labelled_within_2s_of_recovery(
    apiserver: FakeApiServer, options: DiscoveryOptions, dataset_root: Path
) -> None:
    apiserver.add_node(NODE)
    # rand() = 1: the first failure (a resync, nothing new to say) backs off a full 30 s.
    backoff = Backoff(BackoffPolicy(initial=30, cap=60, urgent_cap=1.0), rand=lambda: 1.0)
    async with running_agent(
        apiserver, node=NODE, options=options, resync_interval=0.3, backoff=backoff
    ) as agent:
        await wait_until(lambda: agent.synced_count() >= 1, what="first sync")
        apiserver.fail_all(500)
        await wait_until(
            lambda: any(e.result == "api_error" for e in agent.reconciles()),
            what="a resync failing with 500",
        )
        assert agent.reconciles()[-1].next_in == 30  # a long backoff is under way
        complete_version(dataset_root, "imagenet", "2024-06")
        await wait_until(
            lambda: apiserver.count("GET", answered=500) >= 3, what="two retries during the outage"
        )
        recovered = apiserver.recover()
        labelled = await wait_until(
            lambda: apiserver.labels(NODE).get(KEY) == "2024-06",
            within=5,
            what="dataset label after recovery",
        )

    assert labelled - recovered <= 2.0, f"labelled {labelled - recovered:.2f}s after recovery"
    urgent = [e for e in agent.reconciles() if e.result == "api_error" and e.urgent]
    assert urgent and all(0.1 <= e.next_in <= 1.0 for e in urgent)


async def test_5xx_without_retry_after_back_off_exponentially_with_jitter_and_never_spin(
    apiserver: FakeApiServer, options: DiscoveryOptions
) -> None:
    apiserver.add_node(NODE)
    apiserver.faults.extend(Fault(500) for _ in range(10))
    policy = BackoffPolicy(initial=0.5, cap=30.0)
    sleep = ScriptedSleep(real_from=3600)
    backoff = Backoff(policy, rand=random.Random(17).random)
    async with running_agent(
        apiserver, node=NODE, options=options, sleep=sleep, backoff=backoff, watch=False
    ) as agent:
        await wait_until(lambda: agent.synced_count() >= 1, what="sync after ten 500s")

    ceilings = [min(policy.cap, policy.initial * 2**n) for n in range(10)]
    assert len(sleep.delays) == 10  # one pause per failure: never two attempts back to back
    assert all(policy.floor <= d <= c for d, c in zip(sleep.delays, ceilings, strict=True))
    assert len(set(sleep.delays)) == 10  # jittered, not a fixed schedule
    assert max(sleep.delays[5:]) > ceilings[2]  # and the ceiling really grew
    assert not any(e.urgent for e in agent.reconciles())  # nothing new was waiting


@pytest.mark.slow
async def test_the_measured_sequence_500s_then_429s_converges_with_a_marker_written_meanwhile(
    apiserver: FakeApiServer, options: DiscoveryOptions, dataset_root: Path
) -> None:
    """The sequence from the issue: 6 x 500, then 3 x 429 with `Retry-After: 1`."""
    apiserver.add_node(NODE)
    async with running_agent(apiserver, node=NODE, options=options) as agent:
        await wait_until(lambda: agent.synced_count() >= 1, what="first sync")
        apiserver.faults.extend([Fault(500)] * 6 + [Fault(429, retry_after="1")] * 3)
        complete_version(dataset_root, "imagenet", "2024-06")
        labelled = await wait_until(
            lambda: apiserver.labels(NODE).get(KEY) == "2024-06",
            within=20,
            what="dataset label after the faults",
        )
    first_fault = next(r.at for r in apiserver.requests if r.status == 500)
    answered = _first_ok_after(apiserver, first_fault)
    assert labelled - answered <= 2.0
    failed = [e for e in agent.reconciles() if e.result == "api_error"]
    assert [e.next_in for e in failed[6:]] == [1.0] * 3
    assert all(e.urgent and e.next_in <= 1.5 for e in failed[:6])
