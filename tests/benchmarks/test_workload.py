"""The webhook bench's "every pod different" row measures the engine, not the answer cache:
its pods, sent in turn as loadgen.lua sends them, never share an answer."""

from __future__ import annotations

from pathlib import Path

from benchmarks.webhook.bench_webhook import DISTINCT_PODS
from benchmarks.webhook.profile_miss import miss_path
from benchmarks.webhook.workload import admission_review, worker_pod, write_policy_dir
from webhook import jsonio
from webhook.engine.outcome import EngineSettings
from webhook.policy.loader import load_policy_dir
from webhook.server.answer_cache import DEFAULT_MAX_ENTRIES, CachedAdmitter
from webhook.server.pod_admission import PolicyAdmitter
from webhook.server.review import parse_review


def _admitter(tmp_path: Path) -> CachedAdmitter:
    policies = load_policy_dir(write_policy_dir(tmp_path / "policies"))
    inner = PolicyAdmitter(lambda: policies, EngineSettings())
    return CachedAdmitter(inner, lambda: policies)


def test_distinct_pods_outnumber_the_answer_cache() -> None:
    assert DISTINCT_PODS > DEFAULT_MAX_ENTRIES


def test_every_pod_different_is_judged_afresh_each_time(tmp_path: Path) -> None:
    cache = _admitter(tmp_path)
    # Two rounds of more pods than the cache keeps: no request finds an answer kept.
    count = DEFAULT_MAX_ENTRIES + 8
    bodies = [admission_review(worker_pod(gpus=4, index=i)) for i in range(count)]
    for body in bodies * 2:
        assert cache.admit(parse_review(body)).outcome == "mutated"
    assert (cache.hits, cache.misses) == (0, 2 * count)


def test_copies_of_one_pod_share_an_answer(tmp_path: Path) -> None:
    cache = _admitter(tmp_path)
    for _ in range(3):
        cache.admit(parse_review(admission_review(worker_pod(gpus=4, index=7))))
    assert (cache.hits, cache.misses) == (2, 1)


def test_the_profiled_miss_path_is_serves_and_misses(tmp_path: Path) -> None:
    answer, cache = miss_path(tmp_path)
    bodies = [admission_review(worker_pod(gpus=4, index=i)) for i in range(3)]
    responses = [jsonio.loads(answer(body))["response"] for body in bodies]
    assert all("patch" in r for r in responses)
    # The node cache filled with the stand-in's fleet is in the path: its verdict is sent.
    assert all(any("GPU↔NIC pairs" in w for w in r["warnings"]) for r in responses)
    assert (cache.hits, cache.misses) == (0, 3)
