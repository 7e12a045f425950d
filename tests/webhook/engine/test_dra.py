"""DRA policies: GPU limits become claims from the policy's templates, with the fallbacks."""

from __future__ import annotations

import copy
import dataclasses
from typing import Any

from hypothesis import HealthCheck, given, settings

from common.vocabulary import Label
from tests.kube import assert_valid
from tests.webhook.builders import GPU, SETTINGS, check_mutation, container, make_pod, policy_doc
from tests.webhook.strategies import pods
from webhook.engine.recipe import mutate
from webhook.policy.loader import PolicyOrigin, PolicySet
from webhook.policy.model import PlacementPolicy

PLACEMENT = {
    "gpuNicLink": "PXB",
    "gpuNicPairs": True,
    "singleNumaNode": True,
    "topologyManagerPolicies": ["single-numa-node"],
    "requiredLabels": {"example.com/pool": "h100"},
}
DRA = {
    "gpu": {"deviceClassName": "gpu.nvidia.com"},
    "nic": {"deviceClassName": "dranet"},
    "gpuCounts": [1, 2, 4, 8],
}
DATASET = {"name": "imagenet", "version": "v1", "source": "s3://b/i", "mountPath": "/data/i"}


def dra_doc(name: str = "p", **spec: Any) -> dict[str, Any]:
    fields: dict[str, Any] = {
        "namespaces": ["ml-*"],
        "placement": PLACEMENT,
        "resources": {"cpuPerGpu": 8, "memoryPerGpu": "64Gi", "rdma": {"resource": "rdma/ib"}},
        "launcher": {"numaBinding": "node"},
        "datasets": [DATASET],
        "dra": DRA,
    }
    fields.update(spec)
    return policy_doc(name, **fields)


def policy_set(*docs: dict[str, Any]) -> PolicySet:
    entries = [(PlacementPolicy.model_validate(d), PolicyOrigin("t.yaml", 1)) for d in docs]
    return PolicySet.build(entries)


POLICIES = policy_set(dra_doc())
TORCHRUN = {"command": ["torchrun", "--nproc-per-node=4", "train.py"]}


def trainer(gpus: int = 4, name: str = "trainer") -> dict[str, Any]:
    return container(name, gpus=gpus, **copy.deepcopy(TORCHRUN))


def required_keys(pod: dict[str, Any]) -> set[str]:
    affinity = pod["spec"]["affinity"]["nodeAffinity"]
    terms = affinity["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    return {e["key"] for term in terms for e in term["matchExpressions"]}


def test_gpu_limit_becomes_a_claim_from_the_template_for_that_count() -> None:
    pod = make_pod(trainer(4))
    result = mutate(pod, "ml-team", POLICIES, SETTINGS)
    new = check_mutation(pod, result)
    assert result.allowed and result.warnings == []
    assert new["spec"]["resourceClaims"] == [
        {"name": "topoplace-trainer", "resourceClaimTemplateName": "topoplace-p-4gpu"}
    ]
    worker = new["spec"]["containers"][0]
    assert worker["resources"]["claims"] == [{"name": "topoplace-trainer"}]
    assert GPU not in worker["resources"]["limits"] and GPU not in worker["resources"]["requests"]
    assert "rdma/ib" not in worker["resources"]["limits"]  # the claim pairs the NICs
    # cpuPerGpu and memoryPerGpu still count the claim's GPUs
    assert worker["resources"]["limits"] == {"cpu": "32", "memory": "256Gi"}


def test_affinity_keeps_only_what_dra_does_not_enforce() -> None:
    new = mutate(make_pod(trainer(4)), "ml-team", POLICIES, SETTINGS).pod
    # No GPU↔NIC or GPU-count terms; the kubelet still aligns CPUs and memory (claims get no
    # Topology Manager hints), so the kubelet-shape terms may name those.
    kubelet_shape = {
        Label.TOPOLOGY_MANAGER_SCOPE, Label.CPU_MANAGER_POLICY, Label.MEMORY_MANAGER_POLICY,
        Label.MAX_CPUS_PER_NUMA_NODE, Label.MAX_MEMORY_GIB_PER_NUMA_NODE, Label.NUMA_NODES,
    }  # fmt: skip
    keys = required_keys(new)
    assert {Label.TOPOLOGY_MANAGER_POLICY, "example.com/pool"} <= keys
    assert keys - {Label.TOPOLOGY_MANAGER_POLICY, "example.com/pool"} <= kubelet_shape
    preferred = new["spec"]["affinity"]["nodeAffinity"]
    assert preferred["preferredDuringSchedulingIgnoredDuringExecution"]  # datasets kept


def test_launcher_env_and_datasets_still_apply() -> None:
    new = mutate(make_pod(trainer(2)), "ml-team", POLICIES, SETTINGS).pod
    worker = new["spec"]["containers"][0]
    assert worker["command"][:2] == ["torchrun", "--numa-binding=node"]
    assert any(m["mountPath"] == "/data/i" for m in worker["volumeMounts"])
    assert new["spec"]["initContainers"]  # the prefetch init container


def test_each_worker_gets_its_own_claim() -> None:
    pod = make_pod(trainer(2, "a"), trainer(1, "b"), container("logs"))
    new = check_mutation(pod, mutate(pod, "ml-team", POLICIES, SETTINGS))
    assert new["spec"]["resourceClaims"] == [
        {"name": "topoplace-a", "resourceClaimTemplateName": "topoplace-p-2gpu"},
        {"name": "topoplace-b", "resourceClaimTemplateName": "topoplace-p-1gpu"},
    ]
    assert "claims" not in new["spec"]["containers"][2].get("resources", {})


def test_long_container_names_get_a_valid_claim_name() -> None:
    pod = make_pod(trainer(1, "t" * 63))
    new = check_mutation(pod, mutate(pod, "ml-team", POLICIES, SETTINGS))
    name = new["spec"]["resourceClaims"][0]["name"]
    assert (
        len(name) <= 63 and new["spec"]["containers"][0]["resources"]["claims"][0]["name"] == name
    )


def test_mutating_again_and_reinvocation_add_nothing_twice() -> None:
    once = mutate(make_pod(trainer(4)), "ml-team", POLICIES, SETTINGS).pod
    assert mutate(once, "ml-team", POLICIES, SETTINGS).patch == []
    injected = copy.deepcopy(once)
    injected["spec"]["containers"].append(container("istio-proxy"))
    again = mutate(injected, "ml-team", POLICIES, SETTINGS)
    new = check_mutation(injected, again)
    assert len(new["spec"]["resourceClaims"]) == 1
    assert new["spec"]["containers"][0] == once["spec"]["containers"][0]
    assert mutate(new, "ml-team", POLICIES, SETTINGS).patch == []


def test_count_without_a_template_takes_the_device_plugin_path_with_a_warning() -> None:
    pod = make_pod(trainer(3))
    result = mutate(pod, "ml-team", POLICIES, SETTINGS)
    new = check_mutation(pod, result)
    assert "resourceClaims" not in new["spec"]
    assert result.warnings == [
        "worker container trainer: 3 GPUs is not among the policy's DRA gpuCounts (1, 2, 4, 8); "
        "device-plugin path used"
    ]
    limits = new["spec"]["containers"][0]["resources"]["limits"]
    assert limits[GPU] == 3 and limits["rdma/ib"] == "3"
    assert Label.GPU_NIC_PAIRS in required_keys(new)


def test_a_missing_template_takes_the_device_plugin_path_or_is_denied() -> None:
    missing = dataclasses.replace(SETTINGS, claim_templates=lambda ns, name: False)
    result = mutate(make_pod(trainer(4)), "ml-new", POLICIES, missing)
    assert result.allowed and "resourceClaims" not in result.pod["spec"]
    assert result.warnings == [
        "worker container trainer: ResourceClaimTemplate topoplace-p-4gpu is not in namespace "
        "ml-new yet; device-plugin path used"
    ]
    unknown = dataclasses.replace(SETTINGS, claim_templates=lambda ns, name: None)
    assert mutate(make_pod(trainer(4)), "ml-new", POLICIES, unknown).pod["spec"]["resourceClaims"]
    deny = policy_set(dra_doc(onMissing="deny"))
    denied = mutate(make_pod(trainer(4)), "ml-new", deny, missing)
    assert not denied.allowed and denied.patch == []
    assert denied.denial is not None and "topoplace-p-4gpu" in denied.denial
    assert "onMissing: deny" in denied.denial


def test_a_pod_with_claims_of_its_own_keeps_them_and_gets_no_second_allocation() -> None:
    own = [{"name": "mine", "resourceClaimTemplateName": "my-gpus"}]
    pod = make_pod(container("trainer", resources={"claims": [{"name": "mine"}]}))
    pod["spec"]["resourceClaims"] = own
    result = mutate(pod, "ml-team", POLICIES, SETTINGS)
    new = check_mutation(pod, result)
    assert new["spec"]["resourceClaims"] == own
    assert new["spec"]["containers"][0]["resources"]["claims"] == [{"name": "mine"}]
    assert result.warnings[0].startswith(
        "pod already carries resource claims (mine); they are kept"
    )
    assert "rdma/ib" not in str(new)


def test_named_workers_are_rewritten_too() -> None:
    policies = policy_set(dra_doc(workers=["trainer"]))
    pod = make_pod(trainer(8), container("logs"))
    new = check_mutation(pod, mutate(pod, "ml-team", policies, SETTINGS))
    assert new["spec"]["resourceClaims"][0]["resourceClaimTemplateName"] == "topoplace-p-8gpu"
    assert mutate(new, "ml-team", policies, SETTINGS).patch == []


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(pod=pods(["p"]))
def test_every_claimed_worker_gets_exactly_the_template_for_its_count(pod: dict[str, Any]) -> None:
    result = mutate(pod, "ml-team", POLICIES, SETTINGS)
    new = result.pod
    assert_valid(new)
    wanted = {
        c["name"]: int(c["resources"]["limits"][GPU])
        for c in pod["spec"]["containers"]
        if (c.get("resources") or {}).get("limits", {}).get(GPU)
    }
    claims = {
        c["name"]: c["resourceClaimTemplateName"] for c in new["spec"].get("resourceClaims", [])
    }
    for c in new["spec"]["containers"]:
        if c["name"] in wanted:
            limits = c["resources"].get("limits", {})
            assert GPU not in limits and "rdma/ib" not in limits
            (ref,) = c["resources"]["claims"]
            assert claims[ref["name"]] == f"topoplace-p-{wanted[c['name']]}gpu"
    assert len(claims) == len(wanted)
