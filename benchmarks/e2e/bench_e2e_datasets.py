"""Pod create to worker start for a dataset, cold and as a cache hit, on the real kubelets.

A policy names a dataset of 2,000 small files plus one 256 MiB object in the cluster's object
store (e2e/addons/objectstore.py, on 127.0.0.1). The first pod lands on a node without it: its
prefetch init container, Topoplace's image run for real by the e2e runtime, downloads it
before the worker starts. The second pod on that node finds it cached. Timed from the create
call to the worker seen Running (polled every 50 ms); the agent's label for the new version is
timed from the same create. Uses a running `make cluster`, or starts one.
"""

from __future__ import annotations

import json
import secrets
import subprocess
import sys
import time
from typing import Any

import yaml

from benchmarks.e2e.bench_e2e import running_cluster
from e2e import procs
from e2e.addons.objectstore import client
from e2e.kube import Kubectl

__all__ = ["run_e2e_datasets_bench"]

NODE = "cpu-vm"
SMALL_FILES, SMALL_BYTES = 2000, 4096
LARGE_BYTES = 256 << 20
POLICY = "bench-datasets"


def _upload(endpoint: str, bucket: str, prefix: str) -> None:
    from boto3.s3.transfer import TransferConfig

    s3 = client(endpoint)
    s3.create_bucket(Bucket=bucket)
    for i in range(SMALL_FILES):
        s3.put_object(Bucket=bucket, Key=f"{prefix}small/{i:05d}.bin", Body=b"x" * SMALL_BYTES)
    # One multipart upload, as a big file usually is: ranged GETs on the way back.
    big = TransferConfig(multipart_threshold=64 << 20, multipart_chunksize=64 << 20)
    with open("/dev/zero", "rb") as zeros:
        s3.upload_fileobj(_Limited(zeros, LARGE_BYTES), bucket, f"{prefix}large.bin", Config=big)


class _Limited:
    """The first `size` bytes of a file object, for upload_fileobj."""

    def __init__(self, raw: Any, size: int) -> None:
        self.raw, self.left = raw, size

    def read(self, n: int = -1) -> bytes:
        n = self.left if n < 0 else min(n, self.left)
        self.left -= n
        return self.raw.read(n) if n else b""


def _policy(name: str, source: str) -> str:
    return yaml.safe_dump(
        {
            "apiVersion": "topoplace.io/v1alpha1",
            "kind": "PlacementPolicy",
            "metadata": {"name": POLICY},
            "spec": {
                "workers": ["trainer"],
                "datasets": [
                    {"name": name, "version": "v1", "source": source, "mountPath": "/data"}
                ],
            },
        }
    )


def _pod(name: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": {"topoplace.io/policy": POLICY}},
        "spec": {
            "restartPolicy": "Never",
            "nodeSelector": {"kubernetes.io/hostname": NODE},
            "containers": [
                {
                    "name": "trainer",
                    "image": "nvcr.io/nvidia/pytorch:25.01-py3",
                    "resources": {"limits": {"cpu": "1", "memory": "1Gi"}},
                }
            ],
        },
    }


def _to_worker_start(k: Kubectl, namespace: str, name: str, label: str) -> tuple[float, float]:
    """Seconds from create to the worker Running, and to the node's dataset label."""
    t0 = time.monotonic()
    k("create", "-n", namespace, "-f", "-", input=json.dumps(_pod(name)))
    started = labelled = 0.0
    while not (started and labelled):
        if not started:
            pod = k.json("get", "pod", name, "-n", namespace)
            if pod["status"].get("phase") == "Failed":
                raise RuntimeError(f"pod {name} failed: {json.dumps(pod['status'])[:2000]}")
            if pod["status"].get("phase") == "Running":
                started = time.monotonic() - t0
        if not labelled and k.json("get", "node", NODE)["metadata"]["labels"].get(label):
            labelled = time.monotonic() - t0
        if time.monotonic() - t0 > 600:
            raise TimeoutError(f"pod {name} not Running within 600 s")
        time.sleep(0.05)
    return started, labelled


def run_e2e_datasets_bench() -> list[dict[str, Any]]:
    cluster, started_here = running_cluster()
    k = cluster.kubectl
    endpoint = cluster.info["pod_env"]["AWS_ENDPOINT_URL_S3"]
    name = f"bench-{secrets.token_hex(3)}"
    bucket, prefix = "bench-datasets", f"{name}/"
    namespace = f"ml-bench-{secrets.token_hex(3)}"
    rows = []
    try:
        _upload(endpoint, bucket, prefix)
        k(
            "patch", "configmap", "topoplace-policies", "-n", "topoplace-system", "--type=merge",
            "-p", json.dumps({"data": {f"{POLICY}.yaml": _policy(name, f"s3://{bucket}/{prefix}")}}),
        )  # fmt: skip
        k("create", "namespace", namespace)
        procs.wait_for(
            lambda: k.run("get", "sa", "default", "-n", namespace, check=False).returncode == 0,
            f"serviceaccount default in {namespace}",
        )
        probe = json.dumps(_pod("probe"))

        def served() -> bool:
            out = k("create", "-n", namespace, "-f", "-", "--dry-run=server", "-o", "json",
                    input=probe)  # fmt: skip
            return "topoplace.io/applied" in json.loads(out)["metadata"].get("annotations", {})

        procs.wait_for(served, "the webhook serving the benchmark policy", timeout=120)
        label = f"dataset.topoplace.io/{name}"
        data = f"{SMALL_FILES:,} × {SMALL_BYTES // 1024} KiB + 1 × {LARGE_BYTES >> 20} MiB"
        for case, pod in (("cold: prefetched by the init container", "cold"),
                          ("cache hit on the same node", "hit")):  # fmt: skip
            started, labelled = _to_worker_start(k, namespace, pod, label)
            rows.append(
                {
                    "pod": case,
                    "dataset": data,
                    "create → worker Running s": started,
                    "create → node labelled s": labelled if pod == "cold" else "",
                }
            )
    finally:
        k.run("delete", "namespace", namespace, "--wait=false", check=False)
        k.run(
            "patch", "configmap", "topoplace-policies", "-n", "topoplace-system", "--type=merge",
            "-p", json.dumps({"data": {f"{POLICY}.yaml": None}}), check=False,
        )  # fmt: skip
        if started_here:
            subprocess.run([sys.executable, "-m", "e2e.cluster", "down"], check=False)
    return rows
