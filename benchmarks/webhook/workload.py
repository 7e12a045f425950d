"""Realistic admission inputs for the benchmarks: a policy set and controller-made pods.

The pod mirrors what kube-apiserver sends for a JobSet worker after defaulting: generateName,
owner references, projected service-account token, defaulted container fields.
"""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any

from webhook.vocabulary import POLICY_LABEL

__all__ = [
    "BENCH_POLICY",
    "admission_review",
    "jobset",
    "worker_pod",
    "write_policy_dir",
]

BENCH_POLICY = "bench-ddp-full-node"

_POLICY_YAML = f"""\
apiVersion: topoplace.io/v1alpha1
kind: PlacementPolicy
metadata:
  name: {BENCH_POLICY}
spec:
  namespaces: ["ml-*", "default"]
  gpuResource: nvidia.com/gpu
  placement:
    gpuNicLink: PIX
    gpuNicPairs: true
    topologyManagerPolicies: [single-numa-node, restricted]
  resources:
    guaranteed: true
    cpuPerGpu: 12
    memoryPerGpu: 96Gi
    rdma: {{resource: rdma/ib, perGpu: 1}}
  datasets:
    - name: imagenet
      version: "2024-06"
      source: s3://datasets/imagenet/
      mountPath: /data/imagenet
      preferWeight: 80
      prefetch: true
  launcher:
    numaBinding: exclusive
  env: {{NCCL_NET_GDR_LEVEL: PXB, NCCL_IB_HCA: "mlx5"}}
  onMissing: warn
"""


def _filler_policy(i: int) -> str:
    return f"""\
---
apiVersion: topoplace.io/v1alpha1
kind: PlacementPolicy
metadata:
  name: filler-{i:04d}
spec:
  placement:
    singleNumaNode: true
  resources:
    cpuPerGpu: {4 + i % 8}
  launcher:
    numaBinding: node
"""


def write_policy_dir(directory: Path, *, extra_policies: int = 0) -> Path:
    """The bench policy plus `extra_policies` unrelated ones (to show lookup cost is flat)."""
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "bench.yaml").write_text(_POLICY_YAML)
    if extra_policies:
        (directory / "fillers.yaml").write_text(
            "".join(_filler_policy(i) for i in range(extra_policies))
        )
    return directory


def _container(name: str, *, gpus: int, command: list[str] | None, index: int) -> dict[str, Any]:
    c: dict[str, Any] = {
        "name": name,
        "image": "nvcr.io/nvidia/pytorch:24.05-py3",
        "env": [{"name": f"VAR_{i}", "value": str(i)} for i in range(8)]
        + [
            {"name": "NCCL_DEBUG", "value": "WARN"},
            # A literal per replica, as controllers write them: it makes each pod different.
            {"name": "JOB_COMPLETION_INDEX", "value": str(index)},
        ],
        "resources": {"limits": {"nvidia.com/gpu": str(gpus)}} if gpus else {},
        "volumeMounts": [
            {
                "name": "kube-api-access-x7k2p",
                "readOnly": True,
                "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount",
            }
        ],
        "terminationMessagePath": "/dev/termination-log",
        "terminationMessagePolicy": "File",
        "imagePullPolicy": "IfNotPresent",
    }
    if command:
        c["command"] = command
    return c


def _api_access_volume() -> dict[str, Any]:
    """The service-account token volume the API server's admission adds to every pod."""
    return {
        "name": "kube-api-access-x7k2p",
        "projected": {
            "sources": [
                {"serviceAccountToken": {"expirationSeconds": 3607, "path": "token"}},
                {
                    "configMap": {
                        "name": "kube-root-ca.crt",
                        "items": [{"key": "ca.crt", "path": "ca.crt"}],
                    }
                },
            ],
            "defaultMode": 420,
        },
    }


def worker_pod(
    *, gpus: int = 8, containers: int = 1, opted_in: bool = True, index: int = 0
) -> dict[str, Any]:
    """A JobSet worker pod as the API server hands it to admission (after defaulting); its
    completion `index` is in its label and in each container's env, so pods of different
    indexes differ in their spec as a Job's replicas do."""
    launch = (
        "pip list | grep torch && torchrun --nnodes=4 --nproc-per-node=8 "
        "--rdzv-backend=c10d --rdzv-endpoint=$(JOBSET_COORD):29400 train.py --epochs 90"
    )
    main = _container("trainer", gpus=gpus, command=["bash", "-xc", launch], index=index)
    extra = [
        _container(f"side-{i}", gpus=0, command=["sleep", "inf"], index=index)
        for i in range(containers - 1)
    ]
    labels = {
        "jobset.sigs.k8s.io/jobset-name": "llm-pretrain",
        "jobset.sigs.k8s.io/replicatedjob-name": "workers",
        "batch.kubernetes.io/job-completion-index": str(index),
    }
    if opted_in:
        labels[POLICY_LABEL] = BENCH_POLICY
    return {
        "kind": "Pod",
        "apiVersion": "v1",
        "metadata": {
            "generateName": "llm-pretrain-workers-0-0-",
            "labels": labels,
            "annotations": {"jobset.sigs.k8s.io/jobset-name": "llm-pretrain"},
            "ownerReferences": [
                {
                    "apiVersion": "batch/v1",
                    "kind": "Job",
                    "name": "llm-pretrain-workers-0",
                    "uid": "6b1c2f5e-1d7e-4a59-9a0c-2b5a43d5e0a1",
                    "controller": True,
                    "blockOwnerDeletion": True,
                }
            ],
        },
        "spec": {
            "volumes": [_api_access_volume()],
            "containers": [main, *extra],
            "restartPolicy": "Never",
            "terminationGracePeriodSeconds": 30,
            "dnsPolicy": "ClusterFirst",
            "serviceAccountName": "default",
            "serviceAccount": "default",
            "securityContext": {},
            "schedulerName": "default-scheduler",
            "subdomain": "llm-pretrain",
            "tolerations": [
                {
                    "key": "node.kubernetes.io/not-ready",
                    "operator": "Exists",
                    "effect": "NoExecute",
                    "tolerationSeconds": 300,
                }
            ],
            "priority": 0,
            "enableServiceLinks": True,
            "preemptionPolicy": "PreemptLowerPriority",
        },
        "status": {},
    }


def jobset(*, replicated_jobs: int = 4) -> dict[str, Any]:
    """A JobSet as a user writes it: `replicated_jobs` jobs of 4 worker pods, each template
    the bench worker's metadata labels and spec (without the controller-made fields)."""
    pod = worker_pod()
    template = {
        "metadata": {"labels": {POLICY_LABEL: BENCH_POLICY}},
        "spec": {k: v for k, v in pod["spec"].items() if k != "volumes"},
    }
    jobs = [
        {
            "name": f"workers-{i}",
            "replicas": 1,
            "template": {"spec": {"parallelism": 4, "completions": 4, "template": template}},
        }
        for i in range(replicated_jobs)
    ]
    return {
        "apiVersion": "jobset.x-k8s.io/v1alpha2",
        "kind": "JobSet",
        "metadata": {"name": "llm-pretrain", "namespace": "ml-team"},
        "spec": {"replicatedJobs": jobs},
    }


def admission_review(pod: dict[str, Any], *, namespace: str = "ml-team") -> bytes:
    body = {
        "kind": "AdmissionReview",
        "apiVersion": "admission.k8s.io/v1",
        "request": {
            "uid": str(uuid.uuid4()),
            "kind": {"group": "", "version": "v1", "kind": "Pod"},
            "resource": {"group": "", "version": "v1", "resource": "pods"},
            "requestKind": {"group": "", "version": "v1", "kind": "Pod"},
            "requestResource": {"group": "", "version": "v1", "resource": "pods"},
            "namespace": namespace,
            "operation": "CREATE",
            "userInfo": {
                "username": "system:serviceaccount:kube-system:job-controller",
                "uid": "8f0b7a3e-2a57-4d3c-9d71-0f5f8d1f6a11",
                "groups": ["system:serviceaccounts", "system:authenticated"],
            },
            "object": pod,
            "oldObject": None,
            "dryRun": False,
            "options": {"kind": "CreateOptions", "apiVersion": "meta.k8s.io/v1"},
        },
    }
    return json.dumps(body).encode()
