"""Hypothesis strategies for realistic pods as the API server hands them to a webhook:
controller-created names (generateName), projected service-account token volumes, defaulted
fields, several affinity terms, env, init and native sidecar containers, launcher commands."""

from __future__ import annotations

import copy
from typing import Any

from hypothesis import strategies as st

from webhook.vocabulary import POLICY_LABEL

GPU = "nvidia.com/gpu"

names = st.from_regex(r"[a-z][a-z0-9]{0,6}", fullmatch=True)
label_values = st.from_regex(r"[a-z0-9]([a-z0-9.-]{0,8}[a-z0-9])?", fullmatch=True)
cpu = st.sampled_from(["100m", "500m", "1", "2", "3500m", "7.5", "16", 4])
memory = st.sampled_from(["64Mi", "512Mi", "1Gi", "1.5Gi", "64Gi", "200Gi"])

COMMANDS: list[dict[str, Any]] = [
    {},
    {"command": ["python", "train.py"]},
    {"command": ["torchrun", "--nnodes=2", "train.py"]},
    {"command": ["/opt/conda/bin/torchrun"], "args": ["--nproc-per-node=8", "train.py"]},
    {"command": ["bash", "-c", "set -e; torchrun --nnodes=4 --nproc-per-node=8 train.py"]},
    {"command": ["bash", "-xc"], "args": ["cd /w && torchrun train.py && echo done"]},
    {"command": ["python3", "-m", "torch.distributed.run", "t.py"]},
    {"command": ["sh", "-c", "python -m torch.distributed.run --numa-binding=node t.py"]},
    {"args": ["--port", "8080"]},
]


@st.composite
def resources(draw: st.DrawFn, *, gpu: bool) -> dict[str, Any]:
    limits: dict[str, Any] = {}
    requests: dict[str, Any] = {}
    if gpu and draw(st.booleans()):
        limits[GPU] = draw(st.sampled_from([1, 2, 4, 8, "8"]))
    for resource, amounts in (("cpu", cpu), ("memory", memory)):
        shape = draw(st.sampled_from(["none", "limit", "request", "both", "both"]))
        if shape in ("limit", "both"):
            limits[resource] = draw(amounts)
        if shape in ("request", "both"):
            requests[resource] = draw(amounts)  # may exceed the limit: the engine must fix it
    out: dict[str, Any] = {}
    if limits:
        out["limits"] = limits
    if requests:
        out["requests"] = requests
    return out


@st.composite
def env(draw: st.DrawFn) -> list[dict[str, Any]]:
    keys = draw(
        st.lists(st.sampled_from(["NCCL_DEBUG", "NCCL_IB_HCA", "OMP_NUM_THREADS", "MY_VAR"]),
                 unique=True, max_size=3)
    )  # fmt: skip
    items: list[dict[str, Any]] = [{"name": k, "value": draw(st.text(max_size=8))} for k in keys]
    if draw(st.booleans()):
        items.append(
            {"name": "POD_NAME", "valueFrom": {"fieldRef": {"apiVersion": "v1",
                                                             "fieldPath": "metadata.name"}}}
        )  # fmt: skip
    return items


@st.composite
def container(draw: st.DrawFn, name: str, *, gpu: bool, sidecar: bool = False) -> dict[str, Any]:
    c: dict[str, Any] = {
        "name": name,
        "image": draw(st.sampled_from(["nvcr.io/nvidia/pytorch:25.01-py3", "busybox:1.36"])),
        # Copied: decoded JSON never shares lists between containers, and a shared one would
        # make jsonpatch's deepcopy-preserving apply disagree with the engine.
        **copy.deepcopy(draw(st.sampled_from(COMMANDS))),
        # Defaulted by the API server before admission.
        "terminationMessagePath": "/dev/termination-log",
        "terminationMessagePolicy": "File",
        "imagePullPolicy": "IfNotPresent",
        "volumeMounts": [
            {
                "name": "kube-api-access-x7k2p",
                "readOnly": True,
                "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount",
            }
        ],
    }
    res = draw(resources(gpu=gpu))
    if res or draw(st.booleans()):
        c["resources"] = res
    variables = draw(env())
    if variables:
        c["env"] = variables
    if sidecar:
        c["restartPolicy"] = "Always"
    return c


def _expression(key: str, op: str, values: list[str]) -> dict[str, Any]:
    out: dict[str, Any] = {"key": key, "operator": op}
    if op in ("In", "NotIn", "Gt", "Lt"):
        out["values"] = values
    return out


@st.composite
def affinity(draw: st.DrawFn) -> dict[str, Any] | None:
    if draw(st.booleans()):
        return None
    expression = st.builds(
        _expression,
        st.sampled_from(["zone", "example.com/pool", "topoplace.io/gpu-nic-link", "k8s.io/os"]),
        st.sampled_from(["In", "NotIn", "Exists"]),
        st.lists(label_values, min_size=1, max_size=2),
    )  # fmt: skip
    terms = draw(
        st.lists(
            st.fixed_dictionaries({"matchExpressions": st.lists(expression, min_size=1,
                                                                max_size=3)}),
            min_size=1,
            max_size=3,
        )
    )  # fmt: skip
    if draw(st.booleans()):
        terms.append({"matchFields": [{"key": "metadata.name", "operator": "In",
                                       "values": ["node-1"]}]})  # fmt: skip
    node_affinity: dict[str, Any] = {
        "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": terms}
    }
    if draw(st.booleans()):
        node_affinity["preferredDuringSchedulingIgnoredDuringExecution"] = [
            {"weight": 5, "preference": {"matchExpressions": [_expression("zone", "In", ["a"])]}}
        ]
    return {"nodeAffinity": node_affinity}


@st.composite
def pods(draw: st.DrawFn, policy_names: list[str]) -> dict[str, Any]:
    count = draw(st.integers(1, 3))
    init_count = draw(st.integers(0, 2))
    container_names = draw(st.lists(names, min_size=count + init_count, max_size=count + init_count,
                                     unique=True))  # fmt: skip
    containers = [draw(container(n, gpu=True)) for n in container_names[:count]]
    inits = [
        draw(container(n, gpu=False, sidecar=draw(st.booleans()))) for n in container_names[count:]
    ]
    metadata: dict[str, Any] = {
        "generateName": "trainer-7c9d8f-",
        "namespace": "ml-team",
        "labels": {"app": "train", POLICY_LABEL: draw(st.sampled_from(policy_names))},
        "ownerReferences": [
            {"apiVersion": "batch/v1", "kind": "Job", "name": "trainer", "uid": "1234",
             "controller": True, "blockOwnerDeletion": True}
        ],
    }  # fmt: skip
    if draw(st.booleans()):
        metadata["annotations"] = {"example.com/team~a": "x", "kubectl.kubernetes.io/note": "y"}
    spec: dict[str, Any] = {
        "containers": containers,
        "restartPolicy": "Never",
        "terminationGracePeriodSeconds": 30,
        "dnsPolicy": "ClusterFirst",
        "serviceAccountName": "default",
        "schedulerName": "default-scheduler",
        "securityContext": {},
        "enableServiceLinks": True,
        "preemptionPolicy": "PreemptLowerPriority",
        "priority": 0,
        "tolerations": [
            {"key": "node.kubernetes.io/not-ready", "operator": "Exists",
             "effect": "NoExecute", "tolerationSeconds": 300}
        ],
        "volumes": [
            {
                "name": "kube-api-access-x7k2p",
                "projected": {
                    "defaultMode": 420,
                    "sources": [
                        {"serviceAccountToken": {"expirationSeconds": 3607, "path": "token"}},
                        {"configMap": {"name": "kube-root-ca.crt",
                                       "items": [{"key": "ca.crt", "path": "ca.crt"}]}},
                    ],
                },
            }
        ],
    }  # fmt: skip
    if inits:
        spec["initContainers"] = inits
    aff = draw(affinity())
    if aff is not None:
        spec["affinity"] = aff
    return {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": spec}
