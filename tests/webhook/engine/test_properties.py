"""Properties over generated pods: the patch applies and matches, mutation is idempotent,
user data survives, requests never exceed limits, the result is valid and Guaranteed."""

from __future__ import annotations

import copy
import os
import random
from pathlib import Path
from typing import Any

import jsonpatch
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.kube import assert_valid, parse_quantity, qos_class
from tests.webhook.builders import SETTINGS, policy_doc, write_yaml
from tests.webhook.strategies import container, pods
from webhook.engine.recipe import mutate
from webhook.placement_model.filters.selectors import parse_required, term_matches
from webhook.policy.loader import PolicySet, load_policy_dir
from webhook.vocabulary import APPLIED_ANNOTATION

FULL = policy_doc(
    "full",
    placement={
        "gpuNicLink": "PXB",
        "gpuNicPairs": True,
        "singleNumaNode": True,
        "topologyManagerPolicies": ["single-numa-node"],
        "requiredLabels": {"zone": "a"},
    },
    resources={"cpuPerGpu": 2.5, "memoryPerGpu": "16Gi", "rdma": {"resource": "rdma/ib"}},
    datasets=[
        {"name": "imagenet", "version": "v1", "source": "s3://b/i", "mountPath": "/data/i"},
        {
            "name": "c4",
            "version": "2024.1",
            "source": "https://h/c4",
            "mountPath": "/data/c4",
            "prefetch": False,
        },
    ],
    launcher={"numaBinding": "exclusive"},
    env={"NCCL_DEBUG": "INFO", "NCCL_IB_HCA": "mlx5"},
)
NAMED = policy_doc("named", workers=["a", "b", "c"], launcher={"numaBinding": "node"},
                   env={"MY_VAR": "policy"})  # fmt: skip
BARE = policy_doc("bare")
# FULL on DRA: counts 1, 2 and 4 get claims; other counts take the device-plugin path.
DRA = {
    **FULL,
    "metadata": {"name": "dra"},
    "spec": {
        **FULL["spec"],
        "namespaces": ["ml-*"],
        "dra": {
            "gpu": {"deviceClassName": "gpu.nvidia.com"},
            "nic": {"deviceClassName": "dranet"},
            "gpuCounts": [1, 2, 4],
        },
    },
}
NAMES = ["full", "named", "bare", "dra"]
FLAGS = ("--numa-binding=exclusive", "--numa-binding=node")

# Modest by default to keep this directory under 25 s; raise it for a deeper local run.
EXAMPLES = int(os.environ.get("TOPOPLACE_PROPERTY_EXAMPLES", "40"))
common = settings(
    max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)


@pytest.fixture(scope="module")
def policy_set(tmp_path_factory: pytest.TempPathFactory) -> PolicySet:
    directory: Path = tmp_path_factory.mktemp("policies")
    write_yaml(directory / "p.yaml", FULL, NAMED, BARE, DRA)
    return load_policy_dir(directory)


def matches(terms: list[dict[str, Any]], labels: dict[str, str]) -> bool:
    required = {"nodeSelectorTerms": terms}
    parsed = parse_required(
        {"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": required}}}
    )
    return any(term_matches(t, labels, "node-7") for t in parsed or ())


def label_sets(terms: list[dict[str, Any]], seed: int, count: int = 64) -> list[dict[str, str]]:
    """Label sets made of the keys and values the terms name (and integers around them)."""
    rng = random.Random(seed)
    values: dict[str, list[str]] = {}
    for term in terms:
        for e in term.get("matchExpressions") or ():
            found = values.setdefault(e["key"], [])
            for v in e.get("values") or ():
                found.append(v)
                if v.lstrip("-").isdigit():
                    found += [str(int(v) - 1), str(int(v) + 1)]
    out = []
    for _ in range(count):
        out.append({k: rng.choice([*vs, "other"]) for k, vs in values.items()
                    if rng.random() < 0.8})  # fmt: skip
    return out


def containers(pod: dict[str, Any]) -> list[dict[str, Any]]:
    return [*pod["spec"].get("initContainers", []), *pod["spec"]["containers"]]


def by_name(pod: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {c["name"]: c for c in containers(pod)}


def without_flag(argv: list[str]) -> list[str]:
    out = [a for a in argv if a not in FLAGS]
    for flag in FLAGS:
        out = [a.replace(" " + flag, "") if " " in a else a for a in out]
    return out


@common
@given(pod=pods(NAMES))
def test_patch_applies_and_result_is_valid_guaranteed(policy_set, pod):
    assert_valid(pod)  # the generator itself produces API-server-shaped pods
    before = copy.deepcopy(pod)
    result = mutate(pod, "ml-team", policy_set, SETTINGS)
    assert pod == before
    assert jsonpatch.apply_patch(pod, result.patch) == result.pod
    assert_valid(result.pod)
    assert qos_class(result.pod) == "Guaranteed"
    for c in containers(result.pod):
        res = c.get("resources", {})
        for resource, request in res.get("requests", {}).items():
            limit = res.get("limits", {}).get(resource)
            assert limit is None or parse_quantity(request) <= parse_quantity(limit), c["name"]


@common
@given(pod=pods(NAMES))
def test_mutating_twice_adds_nothing(policy_set, pod):
    once = mutate(pod, "ml-team", policy_set, SETTINGS).pod
    assert mutate(once, "ml-team", policy_set, SETTINGS).patch == []
    # Even without the annotation (a policy edit changed its hash), nothing else is added.
    stripped = copy.deepcopy(once)
    del stripped["metadata"]["annotations"][APPLIED_ANNOTATION]
    again = mutate(stripped, "ml-team", policy_set, SETTINGS)
    assert [op["path"] for op in again.patch] == ["/metadata/annotations/topoplace.io~1applied"]


@common
@given(
    pod=pods(NAMES),
    added=st.lists(st.booleans(), min_size=1, max_size=3),
    data=st.data(),
)
def test_reinvocation_brings_added_containers_to_the_same_state(policy_set, pod, added, data):
    # A sidecar injector (a service mesh) adds containers after us; the API server calls us
    # again (reinvocationPolicy: IfNeeded) with the applied annotation already on the pod.
    once = mutate(pod, "ml-team", policy_set, SETTINGS).pod
    injected = copy.deepcopy(once)
    for i, as_init in enumerate(added):
        new = data.draw(container(f"injected-{i}", gpu=False, sidecar=as_init))
        injected["spec"].setdefault("initContainers" if as_init else "containers", []).append(new)
    again = mutate(injected, "ml-team", policy_set, SETTINGS)
    assert jsonpatch.apply_patch(injected, again.patch) == again.pod
    assert_valid(again.pod)
    assert qos_class(again.pod) == "Guaranteed"
    assert mutate(again.pod, "ml-team", policy_set, SETTINGS).patch == []


@common
@given(pod=pods(NAMES))
def test_user_data_is_preserved(policy_set, pod):
    result = mutate(pod, "ml-team", policy_set, SETTINGS)
    old_aff = pod["spec"].get("affinity", {}).get("nodeAffinity", {})
    new_aff = result.pod["spec"].get("affinity", {}).get("nodeAffinity", {})
    key = "requiredDuringSchedulingIgnoredDuringExecution"
    old_terms = old_aff.get(key, {}).get("nodeSelectorTerms", [])
    new_terms = new_aff.get(key, {}).get("nodeSelectorTerms", [])
    # The user's terms keep their meaning: a node the result matches, they match too (the
    # result is their minimal form with the policy's requirements added).
    if old_terms:
        for labels in label_sets(old_terms + new_terms, seed=len(str(pod))):
            if matches(new_terms, labels):
                assert matches(old_terms, labels), (labels, old_terms, new_terms)
    pref = "preferredDuringSchedulingIgnoredDuringExecution"
    old_pref = old_aff.get(pref, [])
    assert new_aff.get(pref, [])[: len(old_pref)] == old_pref

    new_containers = by_name(result.pod)
    for name, old in by_name(pod).items():
        new = new_containers[name]
        old_env = old.get("env", [])
        assert new.get("env", [])[: len(old_env)] == old_env
        old_argv = old.get("command", []) + old.get("args", [])
        new_argv = new.get("command", []) + new.get("args", [])
        if any("--numa-binding" in a for a in old_argv):
            assert new_argv == old_argv  # the user's own binding is never touched or repeated
        else:
            assert without_flag(new_argv) == old_argv
        for field in ("image", "volumeMounts", "terminationMessagePath", "restartPolicy"):
            if field in old and field != "volumeMounts":
                assert new[field] == old[field]
        old_mounts = old.get("volumeMounts", [])
        assert new.get("volumeMounts", [])[: len(old_mounts)] == old_mounts
    assert result.pod["spec"]["volumes"][:1] == pod["spec"]["volumes"]
    assert result.pod["metadata"]["generateName"] == pod["metadata"]["generateName"]
