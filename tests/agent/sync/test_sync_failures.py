"""Failures: API errors back off and recover, a missing node is waited for, a failing
discovery keeps the last good labels. Sleeps are scripted: backoff delays are recorded and
return at once, so these run in milliseconds and the chosen delays can be checked."""

from __future__ import annotations

import random

from agent.discovery.discover import Discovery, DiscoveryError, DiscoveryOptions, discover
from agent.sync.labels.node_diff import owned_part
from common.backoff import Backoff, BackoffPolicy
from common.vocabulary import Label
from tests.agent.sync.conftest import NODE
from tests.agent.sync.fake_apiserver import FakeApiServer, Fault
from tests.agent.sync.harness import ScriptedSleep, running_agent, wait_until

POLICY = BackoffPolicy(initial=0.5, multiplier=2.0, cap=30.0)


async def test_twenty_failures_in_a_row_then_recovery_converge_without_spinning(
    apiserver: FakeApiServer, options: DiscoveryOptions
) -> None:
    apiserver.add_node(NODE, labels={"kubernetes.io/hostname": NODE})
    await apiserver.stop_listening()  # the first five attempts find nobody listening

    async def script(n: int) -> None:
        if n == 5:
            await apiserver.start_listening()
            for _ in range(5):
                apiserver.faults.append(Fault(500))
            for _ in range(5):
                apiserver.faults.append(Fault(429, retry_after="2"))
            for _ in range(5):
                # aiohttp silently retries an idempotent request once after a reset, so a
                # failure the client sees takes two drops in a row.
                apiserver.faults.extend([Fault(drop=True), Fault(drop=True)])

    sleep = ScriptedSleep(real_from=3600, on_sleep=script)
    backoff = Backoff(POLICY, rand=random.Random(5).random)
    async with running_agent(
        apiserver, node=NODE, options=options, sleep=sleep, backoff=backoff, watch=False
    ) as agent:
        await wait_until(lambda: agent.synced_count() >= 1)

    results = [e.result for e in agent.reconciles()]
    assert results == ["api_error"] * 20 + ["patched"]
    # One sleep per failure: never two attempts without a pause.
    assert len(sleep.delays) == 20
    assert all(POLICY.floor <= d <= POLICY.cap for d in sleep.delays)
    # The 429s said "Retry-After: 2" and were obeyed.
    assert all(d >= 2 for d in sleep.delays[10:15])
    # Requests that reached the server: 5 x 500, 5 x 429, 10 drops, then one GET and one PATCH.
    assert [r.status for r in apiserver.requests] == [500] * 5 + [429] * 5 + [0] * 10 + [200] * 2
    assert owned_part(apiserver.labels(NODE)) == dict(discover(options).labels)
    assert agent.metrics.ready


async def test_backoff_delays_grow_to_the_cap_while_the_api_server_fails(
    apiserver: FakeApiServer, options: DiscoveryOptions
) -> None:
    apiserver.add_node(NODE)
    apiserver.faults.extend(Fault(503) for _ in range(12))
    sleep = ScriptedSleep(real_from=3600)
    # rand() = 1: each delay is the full ceiling, so growth and cap are visible.
    backoff = Backoff(POLICY, rand=lambda: 1.0)
    async with running_agent(
        apiserver, node=NODE, options=options, sleep=sleep, backoff=backoff, watch=False
    ) as agent:
        await wait_until(lambda: agent.synced_count() >= 1)

    assert sleep.delays == [0.5, 1, 2, 4, 8, 16, 30, 30, 30, 30, 30, 30]


async def test_node_missing_at_start_is_waited_for(
    apiserver: FakeApiServer, options: DiscoveryOptions
) -> None:
    async def script(n: int) -> None:
        if n == 3:
            apiserver.add_node(NODE, labels={"kubernetes.io/hostname": NODE})

    sleep = ScriptedSleep(real_from=3600, on_sleep=script)
    async with running_agent(
        apiserver, node=NODE, options=options, sleep=sleep, backoff=Backoff(POLICY), watch=False
    ) as agent:
        await wait_until(lambda: agent.synced_count() >= 1)

    assert [e.result for e in agent.reconciles()] == ["node_missing"] * 3 + ["patched"]
    assert [(r.method, r.status) for r in apiserver.requests] == [("GET", 404)] * 3 + [
        ("GET", 200),
        ("PATCH", 200),
    ]
    assert apiserver.labels(NODE)["kubernetes.io/hostname"] == NODE


async def test_a_conflict_on_patch_is_retried_with_a_fresh_read(
    apiserver: FakeApiServer, options: DiscoveryOptions
) -> None:
    apiserver.add_node(NODE)
    apiserver.faults.append(Fault(409, method="PATCH"))
    sleep = ScriptedSleep(real_from=3600)
    async with running_agent(
        apiserver, node=NODE, options=options, sleep=sleep, watch=False
    ) as agent:
        await wait_until(lambda: agent.synced_count() >= 1)

    assert [e.result for e in agent.reconciles()] == ["api_error", "patched"]
    assert [(r.method, r.status) for r in apiserver.requests] == [
        ("GET", 200),
        ("PATCH", 409),
        ("GET", 200),
        ("PATCH", 200),
    ]


async def test_discovery_errors_keep_the_last_good_labels(
    apiserver: FakeApiServer, options: DiscoveryOptions
) -> None:
    apiserver.add_node(NODE)
    good = discover(options)
    calls = 0

    def flaky() -> Discovery:
        nonlocal calls
        calls += 1
        if calls == 1:
            return good
        raise DiscoveryError("no CPUs and no PCI devices readable (test)")

    async with running_agent(
        apiserver,
        node=NODE,
        options=options,
        discover_fn=flaky,
        resync_interval=0.05,
        backoff=Backoff(BackoffPolicy(initial=0.05, cap=0.1, floor=0.02)),
        watch=False,
    ) as agent:
        await wait_until(lambda: len(agent.reconciles()) >= 4)
        # Someone removes one of our labels meanwhile: the last good set is restored.
        apiserver.edit(NODE, labels={Label.NUMA_NODES: None})
        await wait_until(lambda: Label.NUMA_NODES in apiserver.labels(NODE))

    events = agent.reconciles()
    assert events[0].result == "patched"
    assert {e.result for e in events[1:]} == {"discovery_error"}
    assert all(e.synced for e in events)
    assert owned_part(apiserver.labels(NODE)) == dict(good.labels)
