"""Replay (engine/replay) against the engine itself: a differential test over the shipped
examples, the benchmark's JobSet worker, a pod of every shipped policy's steps and
hypothesis-generated pods. For each pod and a twin that differs only where its form does not
look (names, labels, other annotations, `env` values, hostname), the replayed answer must be
the engine's, byte for byte: patch, warnings, verdict, mutated pod."""

from __future__ import annotations

import base64
import copy
from pathlib import Path
from typing import Any

import jsonpatch
import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from benchmarks.webhook.workload import BENCH_POLICY, worker_pod, write_policy_dir
from tests.conftest import REPO_ROOT as REPO
from tests.webhook.builders import SETTINGS, container, make_pod, policy_doc, write_yaml
from tests.webhook.engine.test_properties import BARE, DRA, EXAMPLES, FULL, NAMED, NAMES
from tests.webhook.strategies import pods
from webhook import jsonio
from webhook.engine.outcome import EngineSettings, Mutation
from webhook.engine.patch import JsonPatch
from webhook.engine.pod_fields import InvalidPod
from webhook.engine.recipe import mutate
from webhook.engine.replay.form import form_key, reusable
from webhook.engine.replay.patch_steps import PatchSteps
from webhook.engine.replay.replayer import MAX_FORM_BYTES, Replayer
from webhook.policy.loader import PolicySet, load_policy_dir
from webhook.vocabulary import APPLIED_ANNOTATION, POLICY_LABEL
from webhook.workloads.templates import pod_templates
from webhook.yaml_io import load_documents

NAMESPACE = "ml-team"
SORTED = orjson.OPT_SORT_KEYS


@pytest.fixture(scope="module")
def policy_set(tmp_path_factory: pytest.TempPathFactory) -> PolicySet:
    directory: Path = tmp_path_factory.mktemp("policies")
    deny = policy_doc("deny", namespaces=["prod"], onMissing="deny")
    write_yaml(directory / "p.yaml", FULL, NAMED, BARE, DRA, deny)
    return load_policy_dir(directory)


def twin(pod: dict[str, Any], n: int = 1) -> dict[str, Any]:
    """Another replica of `pod`: what a controller writes per pod differs, nothing else."""
    other = copy.deepcopy(pod)
    meta = other.setdefault("metadata", {})
    meta["name"] = f"replica-{n}"
    meta.setdefault("labels", {})["batch.kubernetes.io/job-completion-index"] = str(n)
    if isinstance(meta.get("annotations"), dict):
        meta["annotations"][f"example.com/replica-{n}"] = "yes"
    if meta.get("ownerReferences"):
        meta["ownerReferences"] = [{**meta["ownerReferences"][0], "uid": f"uid-{n}"}]
    spec = other["spec"]
    spec["hostname"] = f"replica-{n}"
    for c in [*spec.get("initContainers", []), *spec["containers"]]:
        if c.get("env"):
            c["env"] = [
                {"name": e.get("name"), "value": f"{n}-{i}"} for i, e in enumerate(c["env"])
            ]
    return other


def assert_same(replayed: Mutation, expected: Mutation) -> None:
    assert jsonio.dumps(replayed.patch) == jsonio.dumps(expected.patch)
    assert replayed.warnings == expected.warnings
    assert (replayed.allowed, replayed.denial) == (expected.allowed, expected.denial)
    assert replayed.policy == expected.policy
    assert replayed.applied is expected.applied
    # The same JSON (a replay may leave a map's keys in another order: the patch is what is sent)
    assert orjson.dumps(replayed.pod, option=SORTED) == orjson.dumps(expected.pod, option=SORTED)
    if replayed.written is not None:
        assert base64.b64decode(replayed.written) == jsonio.dumps(expected.patch)


def differential(pod: dict[str, Any], policies: PolicySet, namespace: str = NAMESPACE) -> Replayer:
    """The pod, then two twins, through one Replayer (the second twin is answered from
    the recording made from the first); each answer against the engine's."""
    replayer = Replayer()
    replicas = [pod, twin(pod, 1), twin(pod, 2)]
    before = copy.deepcopy(replicas)
    for one in replicas:
        expected = mutate(one, namespace, policies, SETTINGS)
        assert_same(replayer(one, namespace, policies, SETTINGS), expected)
    assert replicas == before  # no input was touched
    return replayer


@settings(
    max_examples=max(EXAMPLES, 60), deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
@given(pod=pods(NAMES))
def test_generated_pods_and_their_twins_get_the_engines_answer(policy_set, pod):
    replayer = differential(pod, policy_set)
    assert replayer.computed + replayer.replayed == 3


def test_the_twin_of_a_plain_pod_is_answered_from_its_recording(policy_set):
    pod = make_pod(container(gpus=4, env=[{"name": "A", "value": "1"}]), policy="full")
    replayer = differential(pod, policy_set)
    assert (replayer.computed, replayer.replayed) == (2, 1)


@pytest.mark.parametrize("containers", [1, 3])
def test_the_benchmarks_jobset_worker(tmp_path, containers):
    policies = load_policy_dir(write_policy_dir(tmp_path))
    pod = worker_pod(gpus=4, containers=containers, index=0)
    replayer = differential(pod, policies)
    assert replayer.replayed == 1
    assert pod["metadata"]["labels"][POLICY_LABEL] == BENCH_POLICY


EXAMPLES = sorted((REPO / "examples" / "pods").glob("*.yaml"))


@pytest.mark.parametrize("example", EXAMPLES, ids=lambda p: p.name)
def test_every_shipped_example_under_the_shipped_policies(example):
    shipped = load_policy_dir(REPO / "policies")
    docs = load_documents(example.read_text(), source=str(example))
    checked = 0
    for doc in docs:
        for template in pod_templates(doc):
            pod = {"apiVersion": "v1", "kind": "Pod", **template.pod} if template.path else doc
            if POLICY_LABEL in ((pod.get("metadata") or {}).get("labels") or {}):
                differential(copy.deepcopy(pod), shipped)
                checked += 1
    assert checked


@pytest.mark.parametrize(
    "annotations",
    [None, {}, {"a": "b"}, {APPLIED_ANNOTATION: "full@old"}, "missing"],
    ids=["null", "empty", "other", "applied-before", "missing"],
)
def test_every_way_a_pod_holds_annotations(policy_set, annotations):
    pod = make_pod(container(gpus=2), policy="full")
    if annotations != "missing":
        pod["metadata"]["annotations"] = annotations
    differential(pod, policy_set)


def test_denials_and_passes_are_replayed_too(policy_set):
    denied = make_pod(container(gpus=2), policy="deny")  # allowed in namespace prod only
    replayer = differential(denied, policy_set)
    assert replayer.replayed == 1
    assert not mutate(denied, NAMESPACE, policy_set, SETTINGS).allowed
    differential(denied, policy_set, namespace="prod")
    missing = make_pod(container(gpus=2), policy="no-such-policy")
    differential(missing, policy_set)


def test_form_leaves_out_what_a_controller_writes_per_replica():
    pod = worker_pod(gpus=4, index=0)
    assert form_key(pod, NAMESPACE) == form_key(worker_pod(gpus=4, index=7), NAMESPACE)
    assert form_key(pod, NAMESPACE) != form_key(pod, "other-namespace")
    assert form_key(pod, NAMESPACE) != form_key(worker_pod(gpus=2, index=0), NAMESPACE)
    renamed = copy.deepcopy(pod)
    renamed["spec"]["containers"][0]["env"][0]["name"] = "OTHER"
    assert form_key(renamed, NAMESPACE) != form_key(pod, NAMESPACE)
    hosted = copy.deepcopy(pod)
    hosted["spec"]["hostname"] = "replica-3"
    assert form_key(hosted, NAMESPACE) == form_key(pod, NAMESPACE)


@pytest.mark.parametrize(
    "odd",
    [
        lambda p: p["spec"]["containers"][0]["env"].append("not-an-object"),
        lambda p: p.__setitem__("spec", []),
        lambda p: p["metadata"].__setitem__("labels", ["x"]),
    ],
    ids=["env-item-not-object", "spec-not-object", "labels-not-object"],
)
def test_a_pod_with_no_form_goes_to_the_engine(odd):
    pod = worker_pod(gpus=4, index=0)
    odd(pod)
    assert form_key(pod, NAMESPACE) is None


def test_a_malformed_pod_is_refused_every_time(policy_set):
    replayer = Replayer()
    pod = make_pod(container(resources={"limits": "lots"}), policy="full")
    for _ in range(2):
        with pytest.raises(InvalidPod):
            replayer(pod, NAMESPACE, policy_set, SETTINGS)
    assert (replayer.computed, replayer.replayed) == (2, 0)


def test_a_reload_another_setting_or_stamp_starts_afresh(tmp_path, policy_set):
    stamp = [0]
    replayer = Replayer(stamp=lambda: stamp[0])
    pod = make_pod(container(gpus=2), policy="full")
    for n in range(3):
        replayer(twin(pod, n), NAMESPACE, policy_set, SETTINGS)
    assert (replayer.computed, replayer.replayed) == (2, 1)
    write_yaml(tmp_path / "p.yaml", policy_doc("full", placement={"singleNumaNode": True}))
    reloaded = load_policy_dir(tmp_path)
    assert_same(
        replayer(pod, NAMESPACE, reloaded, SETTINGS), mutate(pod, NAMESPACE, reloaded, SETTINGS)
    )
    other = EngineSettings(prefetch_image="img:2")
    replayer(pod, NAMESPACE, reloaded, other)
    stamp[0] = 1
    replayer(pod, NAMESPACE, reloaded, other)
    assert (replayer.computed, replayer.replayed) == (5, 1)


def test_a_pod_past_the_form_bound_always_goes_to_the_engine(policy_set):
    replayer = Replayer()
    big = {"name": "BIG", "value": "x"}
    pod = make_pod(
        container(gpus=2, env=[{**big, "name": f"A_VARIABLE_NAMED_{i:06d}"} for i in range(3000)])
    )
    pod["metadata"]["labels"][POLICY_LABEL] = "full"
    assert len(form_key(pod, NAMESPACE) or b"") > MAX_FORM_BYTES
    for n in range(3):
        assert_same(
            replayer(twin(pod, n), NAMESPACE, policy_set, SETTINGS),
            mutate(twin(pod, n), NAMESPACE, policy_set, SETTINGS),
        )
    assert replayer.replayed == 0
    assert not replayer._seen and not replayer._recorded


def test_recordings_are_bounded(policy_set):
    replayer = Replayer(max_forms=4)
    for gpus in range(1, 11):
        replayer(make_pod(container(gpus=gpus), policy="bare"), NAMESPACE, policy_set, SETTINGS)
        replayer(make_pod(container(gpus=gpus), policy="bare"), NAMESPACE, policy_set, SETTINGS)
    assert len(replayer._recorded) <= 4 and len(replayer._seen) <= 4
    assert replayer.computed == 20


@pytest.mark.parametrize(
    "patch",
    [
        [{"op": "add", "path": "/metadata/labels/x", "value": "1"}],
        [{"op": "replace", "path": "/spec/containers/0/env/0/value", "value": "2"}],
        [{"op": "remove", "path": "/spec/containers/0/env/0"}],
        [{"op": "add", "path": "/spec/hostname", "value": "h"}],
    ],
    ids=["a-label", "an-env-value", "an-env-variable", "hostname"],
)
def test_a_patch_that_touches_what_the_form_leaves_out_is_not_reused(patch: JsonPatch):
    assert not reusable(worker_pod(gpus=4), patch)


def test_a_patch_carrying_a_variable_of_the_pod_is_not_reused():
    pod = worker_pod(gpus=4)
    env = pod["spec"]["containers"][0]["env"]
    patch = [{"op": "replace", "path": "/spec/containers/0/env", "value": [*env, {"name": "X"}]}]
    assert not reusable(pod, patch)
    assert reusable(
        pod, [{"op": "add", "path": "/spec/containers/0/env/-", "value": {"name": "X"}}]
    )


def test_steps_apply_as_jsonpatch_does_and_share_the_rest():
    pod = make_pod(container(gpus=2), container("side"), policy="full")
    patch = [
        {"op": "add", "path": "/spec/initContainers", "value": [{"name": "i"}]},
        {"op": "replace", "path": "/spec/containers/1/image", "value": "other"},
        {"op": "add", "path": "/spec/containers/0/args", "value": ["a"]},
        {"op": "remove", "path": "/metadata/labels/app"},
        {"op": "add", "path": "/spec/containers/0/args/0", "value": "b"},
    ]
    before = copy.deepcopy(pod)
    result = PatchSteps(patch[:4], pod).apply(pod)
    assert result == jsonpatch.apply_patch(pod, patch[:4])
    assert pod == before
    assert result["spec"]["containers"][0]["resources"] is pod["spec"]["containers"][0]["resources"]
    # args is made by one op and walked by the next: the steps walk in turn
    assert PatchSteps(patch, pod).apply(pod) == jsonpatch.apply_patch(pod, patch)
    assert pod == before


@pytest.mark.parametrize(
    "other",
    [
        lambda p: p["spec"].__setitem__("containers", [p["spec"]["containers"][0]]),
        lambda p: p["spec"]["containers"][1].pop("image"),
    ],
    ids=["fewer-containers", "no-image-to-replace"],
)
def test_steps_refuse_a_document_of_another_structure(other):
    pod = make_pod(container(gpus=2), container("side"), policy="full")
    steps = PatchSteps([{"op": "replace", "path": "/spec/containers/1/image", "value": "x"}], pod)
    changed = copy.deepcopy(pod)
    other(changed)
    with pytest.raises((LookupError, ValueError)):
        steps.apply(changed)


def test_an_insert_before_an_edited_item_is_applied_in_turn():
    pod = make_pod(container(gpus=2), policy="full")
    pod["spec"]["initContainers"] = [{"name": "user-init"}, {"name": "user-init-2"}]
    patch = [
        {"op": "add", "path": "/spec/initContainers/0", "value": {"name": "prefetch"}},
        {"op": "add", "path": "/spec/initContainers/1/resources", "value": {}},
    ]
    result = PatchSteps(patch, pod).apply(twin(pod))
    assert result == jsonpatch.apply_patch(twin(pod), patch)
    assert result["spec"]["initContainers"][1] == {"name": "user-init", "resources": {}}


@given(st.integers(0, 3))
def test_twin_helper_changes_only_what_forms_leave_out(n):
    pod = worker_pod(gpus=4, index=0)
    replica = twin(pod, n)
    assert replica["metadata"]["name"] == f"replica-{n}"
    assert form_key(replica, NAMESPACE) == form_key(twin(pod, n + 1), NAMESPACE)
