"""Every mutation of the webhook semantics (docs/architecture.md, "Public contracts"), one
behaviour per test."""

from __future__ import annotations

import copy
import re
from pathlib import Path
from typing import Any

import jsonpatch
import pytest

from common.cache_layout import CACHE_OWNER
from common.vocabulary import Label, dataset_label
from tests.webhook.builders import GPU, SETTINGS, check_mutation, container, make_pod, policy_doc
from webhook.engine.datasets import CACHE_VOLUME
from webhook.engine.outcome import EngineSettings
from webhook.engine.pod_fields import InvalidPod
from webhook.engine.recipe import mutate
from webhook.placement_model.shape_terms import SHAPE_LABELS
from webhook.vocabulary import APPLIED_ANNOTATION, POLICY_LABEL

PLACEMENT = {
    "gpuNicLink": "PXB",
    "gpuNicPairs": True,
    "singleNumaNode": True,
    "topologyManagerPolicies": ["single-numa-node", "restricted"],
    "requiredLabels": {"example.com/pool": "h100"},
}
DATASET = {
    "name": "imagenet",
    "version": "2024-06",
    "source": "s3://bucket/imagenet/",
    "mountPath": "/data/imagenet",
    "preferWeight": 80,
}


def terms(pod: dict[str, Any]) -> list[dict[str, Any]]:
    affinity = pod["spec"]["affinity"]["nodeAffinity"]
    return affinity["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]


def expr(key: str, op: str, *values: str) -> dict[str, Any]:
    return {"key": key, "operator": op, "values": list(values)}


def by_name(items: list[dict[str, Any]], name: str) -> dict[str, Any]:
    return next(i for i in items if i["name"] == name)


# --- opt-in, missing policies, namespaces -------------------------------------------------


def test_pod_without_label_passes_untouched(policies):
    pod = make_pod(policy=None)
    result = mutate(pod, "ml-team", policies(policy_doc("p")), SETTINGS)
    assert result.pod is pod and result.patch == [] and result.policy is None
    assert result.allowed and not result.warnings


def test_unknown_policy_is_admitted_unchanged_with_a_warning(policies):
    pod = make_pod(policy="no-such-policy")
    result = mutate(pod, "ml-team", policies(policy_doc("p")), SETTINGS)
    assert result.allowed and result.patch == [] and result.pod == pod
    assert "no-such-policy" in result.warnings[0] and "does not exist" in result.warnings[0]


def test_unknown_policy_is_denied_when_the_webhook_says_so(policies):
    pod = make_pod(policy="no-such-policy")
    deny = EngineSettings(on_missing_policy="deny")
    result = mutate(pod, "ml-team", policies(policy_doc("p")), deny)
    assert not result.allowed and result.patch == [] and result.policy == "no-such-policy"
    assert result.denial is not None
    assert "'no-such-policy' does not exist (known: p)" in result.denial
    assert POLICY_LABEL in result.denial


def test_namespace_outside_allowlist_warns_by_default(policies):
    policy_set = policies(policy_doc("p", namespaces=["ml-*"]))
    result = mutate(make_pod(), "default", policy_set, SETTINGS)
    assert result.allowed and result.patch == []
    assert "'default'" in result.warnings[0] and "ml-*" in result.warnings[0]


def test_namespace_outside_allowlist_is_denied_with_on_missing_deny(policies):
    policy_set = policies(policy_doc("p", namespaces=["ml-*", "research"], onMissing="deny"))
    result = mutate(make_pod(), "web", policy_set, SETTINGS)
    assert not result.allowed and result.patch == []
    assert (
        "'web'" in result.denial and "'p'" in result.denial and "spec.namespaces" in result.denial
    )
    assert mutate(make_pod(), "research", policy_set, SETTINGS).allowed
    assert mutate(make_pod(), "ml-vision", policy_set, SETTINGS).patch


def test_mirror_pod_is_never_touched(policies):
    pod = make_pod()
    pod["metadata"]["annotations"] = {"kubernetes.io/config.mirror": "abc"}
    result = mutate(pod, "ml-team", policies(policy_doc("p")), SETTINGS)
    assert result.patch == [] and result.warnings


# --- idempotence ---------------------------------------------------------------------------


def test_applied_annotation_names_policy_and_hash_and_second_pass_is_empty(policies):
    policy_set = policies(policy_doc("p", placement=PLACEMENT, datasets=[DATASET]))
    pod = make_pod(container(gpus=8, command=["torchrun", "train.py"]))
    first = mutate(pod, "ml-team", policy_set, SETTINGS)
    check_mutation(pod, first)
    applied = first.pod["metadata"]["annotations"][APPLIED_ANNOTATION]
    assert applied == f"p@{policy_set.hash_of('p')}"
    assert mutate(first.pod, "ml-team", policy_set, SETTINGS).patch == []


def test_mutation_itself_is_idempotent_without_the_annotation(policies):
    # A policy edit changes the hash; re-mutating must still add nothing but the annotation.
    spec = {
        "placement": PLACEMENT,
        "datasets": [DATASET],
        "launcher": {"numaBinding": "exclusive"},
        "env": {"NCCL_DEBUG": "INFO"},
        "resources": {"cpuPerGpu": 12, "memoryPerGpu": "96Gi", "rdma": {"resource": "rdma/ib"}},
    }
    policy_set = policies(policy_doc("p", **spec))
    pod = make_pod(container(gpus=8, command=["bash", "-c", "torchrun train.py"]))
    once = check_mutation(pod, mutate(pod, "ml-team", policy_set, SETTINGS))
    again = copy.deepcopy(once)
    again["metadata"]["annotations"][APPLIED_ANNOTATION] = "p@older"
    second = mutate(again, "ml-team", policy_set, SETTINGS)
    assert second.patch == [
        {
            "op": "replace",
            "path": "/metadata/annotations/topoplace.io~1applied",
            "value": once["metadata"]["annotations"][APPLIED_ANNOTATION],
        }
    ]


# --- node affinity -------------------------------------------------------------------------


def test_required_affinity_created_when_pod_has_none(run_mutate):
    pod = make_pod(container(gpus=4))
    mutated, _ = run_mutate(pod, placement=PLACEMENT)
    base = [
        expr(Label.GPU_NIC_LINK, "In", "PIX", "PXB"),
        expr(Label.GPU_NIC_PAIRS, "Gt", "3"),
        expr(Label.MAX_GPUS_PER_NUMA_NODE, "Gt", "3"),
        expr("example.com/pool", "In", "h100"),
    ]
    found = terms(mutated)
    # One term per kubelet shape that admits the pod (here one: 4 GPUs with 1 CPU fit one
    # NUMA node under either policy), each with the policy's expressions.
    assert len(found) == 1
    assert all(t["matchExpressions"][: len(base)] == base for t in found)
    # The defaults the resources step gave it (1 CPU, 256Mi) need the NUMA labels only.
    assert {"key": Label.MAX_CPUS_PER_NUMA_NODE, "operator": "Exists"} in found[0][
        "matchExpressions"
    ]
    named = {v for t in found for e in t["matchExpressions"] for v in e.get("values", ())
             if e["key"] == Label.TOPOLOGY_MANAGER_POLICY}  # fmt: skip
    assert named == {"single-numa-node", "restricted"}


def numa_terms(pod: dict[str, Any]) -> dict[str, str]:
    numa_keys = (Label.MAX_CPUS_PER_NUMA_NODE, Label.MAX_MEMORY_GIB_PER_NUMA_NODE)
    return {
        e["key"]: e["values"][0]
        for e in terms(pod)[0]["matchExpressions"]
        if e["key"] in numa_keys and e["operator"] == "Gt"
    }


def test_single_numa_node_asks_one_numa_node_for_the_pods_cpus_and_memory(run_mutate):
    # 2 × (12 CPUs, 96Gi) + a sidecar (2 CPUs, 1.5Gi) running beside it; the init container
    # (1 CPU, 1Gi) runs before and needs less. A DGX A100 NPS4 node (32 CPUs, 125 GiB) fails.
    sidecar = container(
        "proxy", restartPolicy="Always", resources={"limits": {"cpu": "2", "memory": "1536Mi"}}
    )
    init = container("setup", resources={"limits": {"cpu": "1", "memory": "1Gi"}})
    pod = make_pod(container(gpus=2), initContainers=[init, sidecar])
    resources = {"cpuPerGpu": 12, "memoryPerGpu": "96Gi"}
    mutated, _ = run_mutate(pod, placement={"singleNumaNode": True}, resources=resources)
    assert numa_terms(mutated) == {
        Label.MAX_CPUS_PER_NUMA_NODE: "25",  # 26 CPUs
        Label.MAX_MEMORY_GIB_PER_NUMA_NODE: "193",  # 193.5 GiB, rounded up
    }


def test_single_numa_node_counts_only_whole_cpus_and_only_for_guaranteed_pods(run_mutate, policies):
    sidecar = container("log", resources={"limits": {"cpu": "500m", "memory": "512Mi"}})
    pod = make_pod(container(gpus=1), sidecar)
    resources = {"cpuPerGpu": 8, "memoryPerGpu": "64Gi"}
    mutated, _ = run_mutate(pod, placement={"singleNumaNode": True}, resources=resources)
    # The 500m sidecar shares the pool: the kubelet pins only the worker's 8 CPUs.
    assert numa_terms(mutated) == {
        Label.MAX_CPUS_PER_NUMA_NODE: "7",
        Label.MAX_MEMORY_GIB_PER_NUMA_NODE: "64",  # 64.5 GiB
    }
    burstable = {"guaranteed": False, "memoryPerGpu": "64Gi"}
    policy_set = policies(policy_doc("p", placement={"singleNumaNode": True}, resources=burstable))
    mutated = mutate(make_pod(container(gpus=1)), "ml-team", policy_set, SETTINGS).pod
    assert numa_terms(mutated) == {}
    assert terms(mutated)[0]["matchExpressions"] == [expr(Label.MAX_GPUS_PER_NUMA_NODE, "Gt", "0")]


def test_required_affinity_added_to_every_existing_term_keeping_user_terms(run_mutate):
    user_terms = [
        {"matchExpressions": [expr("zone", "In", "a")]},
        {"matchFields": [expr("metadata.name", "In", "node-7")]},
        {"matchExpressions": [expr("example.com/pool", "In", "h100"), expr("x", "Exists")]},
    ]
    user_terms[2]["matchExpressions"][1].pop("values")
    affinity = {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": copy.deepcopy(user_terms)
            }
        }
    }
    pod = make_pod(container(gpus=2), affinity=affinity)
    mutated, _ = run_mutate(
        pod, placement={"gpuNicLink": "PIX", **{"requiredLabels": {"example.com/pool": "h100"}}}
    )
    # Each user term, once per kubelet shape of the 2-GPU pod; without the shape labels:
    cores = []
    for term in terms(mutated):
        core = {**term, "matchExpressions": [
            e for e in term["matchExpressions"] if e["key"] not in SHAPE_LABELS]}  # fmt: skip
        if core not in cores:
            cores.append(core)
    link = expr(Label.GPU_NIC_LINK, "In", "PIX")
    pool = expr("example.com/pool", "In", "h100")
    assert cores == [
        {"matchExpressions": [*user_terms[0]["matchExpressions"], link, pool]},
        {"matchFields": user_terms[1]["matchFields"], "matchExpressions": [link, pool]},
        # Already present: not added twice.
        {"matchExpressions": [*user_terms[2]["matchExpressions"], link]},
    ]


def test_gpu_count_rules_skipped_with_warning_for_a_pod_without_gpus(run_mutate):
    pod = make_pod(container("server", resources={"limits": {"cpu": "2", "memory": "1Gi"}}))
    mutated, result = run_mutate(pod, placement={"gpuNicPairs": True, "singleNumaNode": True})
    # Only the kubelet shapes of the Guaranteed pod it became, no GPU count.
    keys = {e["key"] for t in terms(mutated) for e in t["matchExpressions"]}
    assert not keys & {Label.GPU_NIC_PAIRS, Label.MAX_GPUS_PER_NUMA_NODE}
    assert any("gpuNicPairs skipped" in w for w in result.warnings)
    assert any("singleNumaNode skipped" in w for w in result.warnings)


def test_gpu_count_sums_app_containers(run_mutate):
    pod = make_pod(container("a", gpus=2), container("b", gpus=3))
    mutated, _ = run_mutate(pod, placement={"gpuNicPairs": True})
    assert all(t["matchExpressions"][0] == expr(Label.GPU_NIC_PAIRS, "Gt", "4")
               for t in terms(mutated))  # fmt: skip


def test_dataset_preference_appended_after_user_preferences(run_mutate):
    user_pref = {"weight": 10, "preference": {"matchExpressions": [expr("zone", "In", "b")]}}
    affinity = {"nodeAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [user_pref]}}
    pod = make_pod(container(gpus=1), affinity=affinity)
    mutated, _ = run_mutate(pod, datasets=[DATASET])
    preferred = mutated["spec"]["affinity"]["nodeAffinity"][
        "preferredDuringSchedulingIgnoredDuringExecution"
    ]
    assert preferred == [
        user_pref,
        {
            "weight": 80,
            "preference": {"matchExpressions": [expr(dataset_label("imagenet"), "In", "2024-06")]},
        },
    ]


# --- resources -----------------------------------------------------------------------------


def resources_of(pod: dict[str, Any], name: str) -> dict[str, Any]:
    spec = pod["spec"]
    return by_name(spec.get("initContainers", []) + spec["containers"], name)["resources"]


def test_worker_cpu_and_memory_from_per_gpu_settings(run_mutate):
    pod = make_pod(container(gpus=8))
    mutated, _ = run_mutate(pod, resources={"cpuPerGpu": 12, "memoryPerGpu": "96Gi"})
    res = resources_of(mutated, "trainer")
    assert res["limits"] == {GPU: 8, "cpu": "96", "memory": "768Gi"}
    assert res["requests"] == res["limits"]


def test_fractional_per_gpu_cpu_rounds_up_with_warning(run_mutate):
    pod = make_pod(container(gpus=3))
    mutated, result = run_mutate(pod, resources={"cpuPerGpu": 2.5, "memoryPerGpu": "10Gi"})
    assert resources_of(mutated, "trainer")["limits"]["cpu"] == "8"  # 7.5 -> 8
    assert any("rounded up to 8" in w for w in result.warnings)


def test_user_cpu_wins_over_per_gpu_and_request_is_raised_to_limit(run_mutate):
    res = {"limits": {GPU: 2, "cpu": "6", "memory": "64Gi"}, "requests": {"cpu": "2"}}
    pod = make_pod(container(gpus=None, resources=res))
    mutated, result = run_mutate(pod, resources={"cpuPerGpu": 12, "memoryPerGpu": "96Gi"})
    got = resources_of(mutated, "trainer")
    assert got["requests"]["cpu"] == got["limits"]["cpu"] == "6"
    assert got["requests"]["memory"] == got["limits"]["memory"] == "64Gi"
    assert not result.warnings


def test_request_only_gets_a_matching_limit(run_mutate):
    res = {"limits": {GPU: 1}, "requests": {"cpu": "4", "memory": "32Gi"}}
    pod = make_pod(container(resources=res))
    mutated, _ = run_mutate(pod)
    got = resources_of(mutated, "trainer")
    assert got["limits"]["cpu"] == "4" and got["limits"]["memory"] == "32Gi"


def test_request_above_limit_is_lowered_to_the_limit(run_mutate):
    res = {"limits": {GPU: 1, "cpu": "4", "memory": "8Gi"}, "requests": {"memory": "16Gi"}}
    pod = make_pod(container(resources=res))
    mutated, result = run_mutate(pod)
    assert resources_of(mutated, "trainer")["requests"]["memory"] == "8Gi"
    assert any("above limit" in w for w in result.warnings)


def test_fractional_user_cpu_on_worker_rounds_up_but_not_on_sidecar(run_mutate):
    worker = container(resources={"limits": {GPU: 1, "cpu": "1500m", "memory": "8Gi"}})
    sidecar = container("logs", resources={"limits": {"cpu": "250m", "memory": "64Mi"}})
    mutated, result = run_mutate(make_pod(worker, sidecar))
    assert resources_of(mutated, "trainer")["limits"]["cpu"] == "2"
    assert resources_of(mutated, "logs")["requests"]["cpu"] == "250m"
    assert sum("rounded up" in w for w in result.warnings) == 1


def test_every_container_kind_is_guaranteed(run_mutate):
    pod = make_pod(
        container(gpus=1, resources={"limits": {GPU: 1, "cpu": "4", "memory": "8Gi"}}),
        container("exporter"),
        initContainers=[
            container("setup"),
            container("proxy", restartPolicy="Always", resources={"requests": {"cpu": "50m"}}),
        ],
    )
    mutated, result = run_mutate(pod)  # check_mutation asserts Guaranteed QoS
    proxy = resources_of(mutated, "proxy")
    assert proxy["limits"]["cpu"] == proxy["requests"]["cpu"] == "50m"
    assert proxy["limits"]["memory"] == proxy["requests"]["memory"]
    # The same note for several containers comes once, naming them (grouped_warnings).
    assert sorted(w.split(":")[0] for w in result.warnings if "sets no" in w) == [
        "2 containers (setup, exporter)",
        "container proxy",
    ]


def test_rdma_resource_is_gpus_times_per_gpu(run_mutate):
    pod = make_pod(container(gpus=4))
    mutated, _ = run_mutate(pod, resources={"rdma": {"resource": "rdma/ib", "perGpu": 2}})
    got = resources_of(mutated, "trainer")
    assert got["limits"]["rdma/ib"] == got["requests"]["rdma/ib"] == "8"


def test_workers_listed_by_name(run_mutate):
    pod = make_pod(
        container("trainer", gpus=2, command=["torchrun", "x.py"]),
        container("helper", gpus=1, command=["torchrun", "y.py"]),
    )
    mutated, result = run_mutate(
        pod, workers=["trainer", "ghost"], launcher={"numaBinding": "node"}, env={"A": "1"}
    )
    helper = by_name(mutated["spec"]["containers"], "helper")
    trainer = by_name(mutated["spec"]["containers"], "trainer")
    assert helper["command"] == ["torchrun", "y.py"] and "env" not in helper
    assert trainer["command"][1] == "--numa-binding=node" and trainer["env"] == [
        {"name": "A", "value": "1"}
    ]
    assert any("ghost" in w for w in result.warnings)


# --- datasets ------------------------------------------------------------------------------


def test_dataset_volumes_prefetch_container_and_read_only_mount(run_mutate):
    pod = make_pod(container(gpus=8), initContainers=[container("user-init")])
    mutated, _ = run_mutate(pod, datasets=[DATASET])
    spec = mutated["spec"]
    inits = spec["initContainers"]
    assert [c["name"] for c in inits][1:] == ["user-init"]
    prefetch = inits[0]
    assert prefetch["image"] == "img:1"
    assert prefetch["command"] == [
        "topoplace-agent", "prefetch", "--dataset", "imagenet", "--version", "2024-06",
        "--source", "s3://bucket/imagenet/", "--cache-root", "/var/lib/topoplace/datasets",
    ]  # fmt: skip
    # Runs as the cache owner (what the agent's prepare-cache hands the root to), unprivileged.
    sc = prefetch["securityContext"]
    assert (sc["runAsUser"], sc["runAsGroup"]) == CACHE_OWNER and sc["runAsNonRoot"] is True
    assert sc["allowPrivilegeEscalation"] is False and sc["capabilities"] == {"drop": ["ALL"]}
    # One hostPath: the cache root, which must already exist (made by the agent), not a
    # root-owned directory the kubelet would create.
    (volume,) = spec["volumes"]
    assert volume["hostPath"] == {"path": "/var/lib/topoplace/datasets", "type": "Directory"}
    (cache_mount,) = prefetch["volumeMounts"]
    assert cache_mount == {"name": volume["name"], "mountPath": "/var/lib/topoplace/datasets"}
    (mount,) = by_name(spec["containers"], "trainer")["volumeMounts"]
    assert mount == {
        "name": volume["name"],
        "mountPath": "/data/imagenet",
        "subPath": "imagenet/2024-06",
        "readOnly": True,
    }
    assert "volumeMounts" not in by_name(spec["initContainers"], "user-init")


def test_a_dataset_source_secret_becomes_the_prefetch_environment_only(run_mutate):
    pod = make_pod(container(gpus=8))
    mutated, _ = run_mutate(pod, datasets=[{**DATASET, "sourceSecret": "minio-ro"}])
    spec = mutated["spec"]
    (prefetch,) = spec["initContainers"]
    assert prefetch["envFrom"] == [{"secretRef": {"name": "minio-ro"}}]
    assert "envFrom" not in by_name(spec["containers"], "trainer")  # workers never see it


def test_dataset_without_prefetch_only_mounts(run_mutate):
    pod = make_pod(container(gpus=1))
    mutated, _ = run_mutate(pod, datasets=[{**DATASET, "prefetch": False}])
    assert "initContainers" not in mutated["spec"]
    assert len(mutated["spec"]["volumes"]) == 1


def test_two_datasets_share_the_cache_volume(run_mutate):
    other = {**DATASET, "name": "laion", "version": "v2", "mountPath": "/data/laion"}
    mutated, _ = run_mutate(make_pod(container(gpus=2)), datasets=[DATASET, other])
    assert len(mutated["spec"]["volumes"]) == 1
    mounts = by_name(mutated["spec"]["containers"], "trainer")["volumeMounts"]
    assert [(m["mountPath"], m["subPath"]) for m in mounts] == [
        ("/data/imagenet", "imagenet/2024-06"),
        ("/data/laion", "laion/v2"),
    ]
    assert len(mutated["spec"]["initContainers"]) == 2


def test_a_user_volume_with_the_reserved_name_is_not_hijacked(run_mutate):
    pod = make_pod(container(gpus=1), volumes=[{"name": CACHE_VOLUME, "emptyDir": {}}])
    mutated, result = run_mutate(pod, datasets=[DATASET])
    assert mutated["spec"]["volumes"] == [{"name": CACHE_VOLUME, "emptyDir": {}}]
    assert "initContainers" not in mutated["spec"]
    assert any("reserved for the dataset cache" in w for w in result.warnings)


def test_cache_root_is_a_webhook_setting(policies):
    settings = EngineSettings(cache_root=Path("/mnt/nvme/cache"), prefetch_image="i:2")
    pod = make_pod(container(gpus=1))
    result = mutate(pod, "ml-team", policies(policy_doc("p", datasets=[DATASET])), settings)
    paths = {v["hostPath"]["path"] for v in result.pod["spec"]["volumes"]}
    assert paths == {"/mnt/nvme/cache"}
    assert result.pod["spec"]["initContainers"][0]["command"][-1] == "/mnt/nvme/cache"
    check_mutation(pod, result)


def test_dataset_mount_path_taken_by_user_is_left_alone(run_mutate):
    pod = make_pod(
        container(gpus=1, volumeMounts=[{"name": "mine", "mountPath": "/data/imagenet"}]),
        volumes=[{"name": "mine", "emptyDir": {}}],
    )
    mutated, result = run_mutate(pod, datasets=[DATASET])
    assert by_name(mutated["spec"]["containers"], "trainer")["volumeMounts"] == [
        {"name": "mine", "mountPath": "/data/imagenet"}
    ]
    assert any("already mounts mine" in w for w in result.warnings)


# --- launcher and env ----------------------------------------------------------------------


def test_worker_without_torchrun_gets_a_warning(run_mutate):
    pod = make_pod(container(gpus=1, command=["python", "serve.py"]))
    mutated, result = run_mutate(pod, launcher={"numaBinding": "socket"})
    assert mutated["spec"]["containers"][0]["command"] == ["python", "serve.py"]
    assert any("no torchrun" in w and "trainer" in w for w in result.warnings)


def test_env_added_without_overriding_pod_values(run_mutate):
    env = [
        {"name": "NCCL_DEBUG", "value": "WARN"},
        {"name": "X", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
    ]
    pod = make_pod(container(gpus=1, env=copy.deepcopy(env)))
    mutated, _ = run_mutate(pod, env={"NCCL_DEBUG": "INFO", "X": "1", "NCCL_IB_HCA": "mlx5"})
    assert mutated["spec"]["containers"][0]["env"] == [
        *env,
        {"name": "NCCL_IB_HCA", "value": "mlx5"},
    ]


def test_env_from_gets_a_precedence_warning(run_mutate):
    pod = make_pod(container(gpus=1, envFrom=[{"configMapRef": {"name": "nccl"}}]))
    _, result = run_mutate(pod, env={"NCCL_IB_HCA": "mlx5"})
    assert any("envFrom" in w and "NCCL_IB_HCA" in w for w in result.warnings)


# --- patch ---------------------------------------------------------------------------------


def test_patch_escapes_slashes_in_annotation_keys(run_mutate):
    pod = make_pod(container(gpus=1))
    pod["metadata"]["annotations"] = {"a/b~c": "1"}
    _, result = run_mutate(pod)
    paths = [op["path"] for op in result.patch]
    assert "/metadata/annotations/topoplace.io~1applied" in paths


def test_patch_applies_to_a_pod_template_without_metadata_annotations(policies):
    pod = make_pod(container(gpus=1))
    pod["metadata"]["annotations"] = None
    result = mutate(pod, "ml-team", policies(policy_doc("p")), SETTINGS)
    assert jsonpatch.apply_patch(pod, result.patch) == result.pod
    assert result.pod["metadata"]["annotations"][APPLIED_ANNOTATION].startswith("p@")
    assert POLICY_LABEL in result.pod["metadata"]["labels"]


def test_guaranteed_false_only_fills_unset_worker_amounts(policies):
    policy_set = policies(
        policy_doc("p", resources={"guaranteed": False, "cpuPerGpu": 4, "memoryPerGpu": "8Gi"})
    )
    burstable = {"limits": {GPU: 2, "cpu": "8"}, "requests": {"cpu": "2"}}
    pod = make_pod(container(resources=copy.deepcopy(burstable)), container("sidecar"))
    result = mutate(pod, "ml-team", policy_set, SETTINGS)
    assert jsonpatch.apply_patch(pod, result.patch) == result.pod
    trainer, sidecar = result.pod["spec"]["containers"]
    assert trainer["resources"]["limits"]["cpu"] == "8"  # the user's own numbers stay
    assert trainer["resources"]["requests"]["cpu"] == "2"
    assert trainer["resources"]["limits"]["memory"] == "16Gi"  # unset: from memoryPerGpu
    assert trainer["resources"]["requests"]["memory"] == "16Gi"
    assert "resources" not in sidecar


def test_malformed_pod_raises_invalid_pod(policies):
    policy_set = policies(policy_doc("p"))
    for broken in ({"containers": "trainer"}, None, {"containers": [1]}):
        pod = make_pod()
        pod["spec"] = broken
        with pytest.raises(InvalidPod):
            mutate(pod, "ml-team", policy_set, SETTINGS)


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("command", ["torchrun", 5], "spec.containers[0].command must be a list of strings"),
        ("args", "train.py", "spec.containers[0].args must be a list of strings"),
        ("env", "A=1", "spec.containers[0].env must be a list of objects"),
        ("volumeMounts", [None], "spec.containers[0].volumeMounts must be a list of objects"),
        ("resources", "8 GPUs", "spec.containers[0].resources must be an object"),
        ("resources", {"limits": {GPU: [8]}}, "resources.limits values must be quantities"),
        ("name", 7, "spec.containers[0].name must be a string"),
    ],
)
def test_a_container_field_of_the_wrong_type_is_named(policies, field, value, message):
    pod = make_pod(container(gpus=1, command=["torchrun", "x.py"]))
    pod["spec"]["containers"][0][field] = value
    with pytest.raises(InvalidPod, match=re.escape(message)):
        mutate(
            pod, "ml-team", policies(policy_doc("p", launcher={"numaBinding": "node"})), SETTINGS
        )


@pytest.mark.parametrize(
    ("affinity", "message"),
    [
        ("any node", "spec.affinity must be an object"),
        ({"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
            "nodeSelectorTerms": {"matchExpressions": []}}}}, "nodeSelectorTerms must be a list"),
        ({"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
            "nodeSelectorTerms": [{"matchExpressions": ["a"]}]}}},
         "nodeSelectorTerms[0].matchExpressions must be a list of objects"),
    ],
)  # fmt: skip
def test_node_affinity_of_the_wrong_shape_is_named(policies, affinity, message):
    pod = make_pod(container(gpus=1), affinity=affinity)
    with pytest.raises(InvalidPod, match=re.escape(message)):
        mutate(pod, "ml-team", policies(policy_doc("p", placement=PLACEMENT)), SETTINGS)


def test_gpu_given_only_as_request_counts_and_gets_its_limit(run_mutate):
    pod = make_pod(container(resources={"requests": {GPU: 2}}))
    mutated, _ = run_mutate(pod, placement={"gpuNicPairs": True})
    res = mutated["spec"]["containers"][0]["resources"]
    assert res["limits"][GPU] == res["requests"][GPU] == 2
    assert all(t["matchExpressions"][0] == expr(Label.GPU_NIC_PAIRS, "Gt", "1")
               for t in terms(mutated))  # fmt: skip


def test_warnings_fit_the_api_servers_limit(policies):
    # The API server may truncate admission warnings longer than 256 characters.
    policy_set = policies(
        policy_doc(
            "p",
            namespaces=[f"team-{i}-*" for i in range(20)],
            placement={"gpuNicPairs": True},
            launcher={"numaBinding": "exclusive"},
            workers=["w" * 63],
        )
    )
    pod = make_pod(container("c" * 63), container("d" * 63, gpus=1))
    forbidden = mutate(pod, "default", policy_set, SETTINGS)
    allowed = mutate(pod, "team-1-x", policy_set, SETTINGS)
    missing = mutate(make_pod(policy="q" * 63), "default", policy_set, SETTINGS)
    warnings = forbidden.warnings + allowed.warnings + missing.warnings
    assert len(warnings) >= 4
    assert all(len(w) <= 256 for w in warnings), max(warnings, key=len)


def test_pod_without_workers_gets_no_dataset_plumbing(run_mutate):
    pod = make_pod(container("web", resources={"limits": {"cpu": "1", "memory": "1Gi"}}))
    mutated, result = run_mutate(pod, datasets=[DATASET], env={"A": "1"})
    assert "volumes" not in mutated["spec"] and "initContainers" not in mutated["spec"]
    assert "env" not in mutated["spec"]["containers"][0]
    assert any("no worker containers" in w for w in result.warnings)


def test_zero_cpu_is_treated_as_unset(run_mutate):
    pod = make_pod(container(resources={"limits": {GPU: 2, "cpu": "0", "memory": "0"}}))
    mutated, _ = run_mutate(pod, resources={"cpuPerGpu": 4, "memoryPerGpu": "8Gi"})
    res = mutated["spec"]["containers"][0]["resources"]
    assert res["limits"]["cpu"] == res["requests"]["cpu"] == "8"
    assert res["limits"]["memory"] == res["requests"]["memory"] == "16Gi"


@pytest.mark.parametrize(("flag", "written"), [("500Gi", "536870912000"), ("2T", "2000000000000")])
def test_a_cache_bound_reaches_every_prefetcher_as_the_agent_reads_it(
    policies, flag: str, written: str
) -> None:
    import argparse

    from agent.cli.prefetch import parse_size
    from webhook.cli.engine_flags import add_engine_arguments, settings_from_args

    parser = argparse.ArgumentParser()
    add_engine_arguments(parser)
    settings = settings_from_args(parser.parse_args(["--dataset-cache-max-bytes", flag]))
    assert isinstance(settings, EngineSettings)
    pod = make_pod(container(gpus=1))
    result = mutate(pod, "ml-team", policies(policy_doc("p", datasets=[DATASET])), settings)
    prefetch = check_mutation(pod, result)["spec"]["initContainers"][0]
    assert prefetch["command"][-2:] == ["--max-cache-bytes", written]
    assert parse_size(written) == int(written)  # the agent's own parser takes it as bytes


@pytest.mark.parametrize("bad", ["lots", "0", "-5Gi", "1.5"])
def test_a_cache_bound_that_is_not_a_size_in_bytes_is_named(bad: str) -> None:
    import argparse

    from webhook.cli.engine_flags import add_engine_arguments, settings_from_args

    parser = argparse.ArgumentParser()
    add_engine_arguments(parser)
    problem = settings_from_args(parser.parse_args([f"--dataset-cache-max-bytes={bad}"]))
    assert problem == f"--dataset-cache-max-bytes {bad!r}: expected a size in bytes such as 500Gi"


def test_a_pod_whose_terms_times_shapes_pass_the_bound_is_admitted_unchanged(policies):
    """Each user term is written once per kubelet shape: 64 terms of an 8-GPU pod under a
    restricted policy would write hundreds; the pod is answered at once, unchanged."""
    placement = {"topologyManagerPolicies": ["restricted", "best-effort"]}
    resources = {"cpuPerGpu": 24, "memoryPerGpu": "200Gi"}
    policy_set = policies(policy_doc("p", placement=placement, resources=resources))
    user = [{"matchExpressions": [expr("zone", "In", str(i))]} for i in range(64)]
    affinity = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": user}}}  # fmt: skip
    pod = make_pod(container(gpus=8), affinity=affinity)
    result = mutate(pod, "ml-team", policy_set, SETTINGS)
    assert result.patch == [] and result.pod is pod
    (warning,) = result.warnings
    assert "more than 256" in warning and "admitted unchanged" in warning
    # One term of the user's is fine: its shapes are written.
    affinity["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"] = {
        "nodeSelectorTerms": user[:1]
    }
    pod = make_pod(container(gpus=8), affinity=affinity)
    assert len(terms(mutate(pod, "ml-team", policy_set, SETTINGS).pod)) > 1
