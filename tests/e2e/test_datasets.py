"""Datasets end to end on the real kubelets: the prefetch init container the webhook injects
runs Topoplace's image for real, against an S3-compatible server on 127.0.0.1; it fills the
node's cache, the agent labels the node, the worker starts after it, the next pod goes to that
node and finds the data there, and the node's agent counts the download, its bytes and the
hit from the init containers' termination messages (where Prometheus runs); a source that
does not exist fails the pod with the prefetch's own reason and leaves nothing half-written;
a version in use survives another prefetch's eviction and goes once its pod is gone."""

from __future__ import annotations

import json
import secrets
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from common.cache_layout import MARKER_FILE
from common.vocabulary import DATASET_PREFIX
from e2e import procs
from e2e.addons import prometheus
from e2e.cluster import Cluster
from e2e.kube import Kubectl
from tests.agent.cache.helpers import leftovers
from tests.e2e.helpers import patch_policies, phase
from tests.s3server import FAKE_AWS, S3Server, running_s3
from webhook.engine.outcome import DEFAULT_PREFETCH_IMAGE as IMAGE

NODE = "cpu-vm"  # holds no dataset at first: the first pod is pinned there
POLICY = "e2e-datasets"
FILES = {f"shard-{i:03d}.bin": secrets.token_bytes(2048 + i) for i in range(40)}


@pytest.fixture(scope="module")
def s3() -> Iterator[S3Server]:
    with running_s3() as server:
        yield server


@pytest.fixture(scope="module")
def dataset(s3: S3Server, kubectl: Kubectl) -> Iterator[dict[str, str]]:
    """A dataset in a fresh bucket, and a policy that prefetches it (another for a source
    that does not exist), installed through the policies ConfigMap."""
    bucket = s3.new_bucket()
    s3.put_tree(bucket, "mnist/v1/", FILES)
    name = f"e2e-{secrets.token_hex(3)}"  # a new label per run: nothing cached before
    policies = {
        POLICY: policy(POLICY, name, f"s3://{bucket}/mnist/v1/"),
        f"{POLICY}-missing": policy(f"{POLICY}-missing", f"{name}-x", f"s3://{bucket}/absent/"),
    }
    patch_policies(kubectl, {f"{k}.yaml": yaml.safe_dump(v) for k, v in policies.items()})
    yield {"name": name, "bucket": bucket}
    patch_policies(kubectl, {f"{k}.yaml": None for k in policies})


def policy(name: str, dataset: str, source: str) -> dict[str, Any]:
    return {
        "apiVersion": "topoplace.io/v1alpha1",
        "kind": "PlacementPolicy",
        "metadata": {"name": name},
        "spec": {
            "namespaces": ["ml-*"],
            "workers": ["trainer"],
            "datasets": [
                {
                    "name": dataset,
                    "version": "v1",
                    "source": source,
                    "mountPath": "/data/mnist",
                    "preferWeight": 100,
                    "sourceSecret": "e2e-s3",
                }
            ],
        },
    }


def worker_pod(name: str, policy_name: str, *, pinned: bool) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "restartPolicy": "Never",
        "containers": [
            {
                "name": "trainer",
                "image": "nvcr.io/nvidia/pytorch:25.01-py3",
                "resources": {"limits": {"cpu": "1", "memory": "1Gi"}},
            }
        ],
    }
    if pinned:
        spec["nodeSelector"] = {"kubernetes.io/hostname": NODE}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": {"topoplace.io/policy": policy_name}},
        "spec": spec,
    }


@pytest.fixture
def s3_secret(kubectl: Kubectl, namespace: str, s3: S3Server) -> None:
    """The policy's sourceSecret in the pod's namespace: the endpoint and keys."""
    data = {**FAKE_AWS, "AWS_ENDPOINT_URL_S3": s3.endpoint, "AWS_ALLOW_HTTP": "true"}
    secret = {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": "e2e-s3", "namespace": namespace},
        "stringData": data,
    }
    kubectl.apply(secret)


def prefetch_counts(cluster: Cluster) -> dict[str, float] | None:
    """NODE's agent's prefetch counters as Prometheus scraped them: outcome -> count, and
    `bytes`; None where the cluster runs no Prometheus."""
    scraper = cluster.info.get("prometheus")
    if not scraper:
        return None
    names = "topoplace_agent_dataset_prefetch(es|_bytes)_total"
    found = prometheus.query(str(scraper["url"]), f'{{__name__=~"{names}",node="{NODE}"}}')
    return {s["metric"].get("outcome", "bytes"): float(s["value"][1]) for s in found["result"]}


def test_a_dataset_is_prefetched_by_the_init_container_then_found_by_the_next_pod(
    cluster: Cluster,
    kubectl: Kubectl,
    namespace: str,
    create: Callable[..., Any],
    s3: S3Server,
    dataset: dict[str, str],
    s3_secret: None,
) -> None:
    name, bucket = dataset["name"], dataset["bucket"]
    cache = Path(cluster.nodes[NODE]["datasets"]) / name / "v1"
    label = f"{DATASET_PREFIX}{name}"
    before = len(s3.requests)
    counted = prefetch_counts(cluster)

    created = json.loads(create(worker_pod("first", POLICY, pinned=True), namespace).stdout)
    (init,) = created["spec"]["initContainers"]
    assert init["command"][:2] == ["topoplace-agent", "prefetch"]
    pod = procs.wait_for(
        lambda: phase(kubectl, namespace, "first", "Running"),
        "the first worker Running",
        timeout=90,
    )
    assert pod["spec"]["nodeName"] == NODE
    (prefetch,) = pod["status"]["initContainerStatuses"]
    done = prefetch["state"]["terminated"]
    assert (done["exitCode"], done["reason"]) == (0, "Completed")
    (worker,) = pod["status"]["containerStatuses"]
    # The worker started only after the prefetch had exited.
    assert worker["state"]["running"]["startedAt"] >= done["finishedAt"]
    assert (cache / MARKER_FILE).is_file()
    assert {p.name: p.read_bytes() for p in cache.iterdir() if p.name in FILES} == FILES
    assert len(s3.gets(bucket, "mnist/v1/", since=before)) == len(FILES)
    procs.wait_for(
        lambda: kubectl.json("get", "node", NODE)["metadata"]["labels"].get(label) == "v1",
        f"the agent labelling {NODE} with {label}=v1",
        timeout=30,
        interval=0.2,
    )

    # The next pod, not pinned: the label draws it to that node, and the data is there.
    hit_from = len(s3.requests)
    create(worker_pod("second", POLICY, pinned=False), namespace)
    pod = procs.wait_for(
        lambda: phase(kubectl, namespace, "second", "Running"),
        "the second worker Running",
        timeout=90,
    )
    assert pod["spec"]["nodeName"] == NODE
    (prefetch,) = pod["status"]["initContainerStatuses"]
    assert prefetch["state"]["terminated"]["exitCode"] == 0
    assert s3.gets(bucket, "mnist/v1/", since=hit_from) == []  # a cache hit: no data read
    if counted is not None:
        # One download of every file's bytes, then one hit, from the pods' statuses.
        grown = {"downloaded": 1, "hit": 1, "failed": 0, "bytes": sum(map(len, FILES.values()))}
        procs.wait_for(
            lambda: (
                {k: v - counted.get(k, 0) for k, v in (prefetch_counts(cluster) or {}).items()}
                == grown
            ),
            f"the agent on {NODE} counting one download and one hit, scraped",
            timeout=30,
            interval=1,
        )


def test_a_source_that_does_not_exist_fails_the_pod_with_the_prefetch_reason(
    cluster: Cluster,
    kubectl: Kubectl,
    namespace: str,
    create: Callable[..., Any],
    dataset: dict[str, str],
    s3_secret: None,
) -> None:
    name = f"{dataset['name']}-x"
    create(worker_pod("nowhere", f"{POLICY}-missing", pinned=True), namespace)
    # restartPolicy Never: the failed init container fails the pod (Init:Error), no retry.
    pod = procs.wait_for(
        lambda: phase(kubectl, namespace, "nowhere", "Failed"),
        "the pod failed by its prefetch init container",
        timeout=90,
    )
    (status,) = pod["status"]["initContainerStatuses"]
    done = status["state"]["terminated"]
    assert (done["exitCode"], done["reason"]) == (3, "Error")  # not found
    assert done["message"].startswith("prefetch failed: ") and "absent" in done["message"]
    assert "state" not in pod["status"]["containerStatuses"][0] or (
        "running" not in pod["status"]["containerStatuses"][0]["state"]
    )  # the worker never started
    dataset_dir = Path(cluster.nodes[NODE]["datasets"]) / name
    assert leftovers(dataset_dir) == [] and not (dataset_dir / "v1").exists()


def evictor(name: str, dataset: str, bucket: str) -> dict[str, Any]:
    """Another prefetch on the node, of another dataset, with a cache budget of one byte: it
    evicts every version it may."""
    root = "/var/lib/topoplace/datasets"
    command = [
        "topoplace-agent", "prefetch", "--dataset", dataset, "--version", "v1",
        "--source", f"s3://{bucket}/other/v1/", "--max-cache-bytes", "1", "--cache-root", root,
    ]  # fmt: skip
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {
            "restartPolicy": "Never",
            "nodeSelector": {"kubernetes.io/hostname": NODE},
            "volumes": [
                {
                    "name": "cache",
                    "hostPath": {"path": "/var/lib/topoplace/datasets", "type": "Directory"},
                }
            ],
            "containers": [
                {
                    "name": "prefetch",
                    "image": IMAGE,
                    "command": command,
                    "envFrom": [{"secretRef": {"name": "e2e-s3"}}],
                    "securityContext": {"runAsUser": 65532, "runAsGroup": 65532},
                    "volumeMounts": [{"name": "cache", "mountPath": "/var/lib/topoplace/datasets"}],
                }
            ],
        },
    }


def test_a_version_in_use_is_never_evicted_and_goes_once_its_pod_is_gone(
    cluster: Cluster,
    kubectl: Kubectl,
    namespace: str,
    create: Callable[..., Any],
    s3: S3Server,
    dataset: dict[str, str],
    s3_secret: None,
) -> None:
    name, bucket = dataset["name"], dataset["bucket"]
    s3.put_tree(bucket, "other/v1/", {"a.bin": b"a" * 4096})
    version = Path(cluster.nodes[NODE]["datasets"]) / name / "v1"
    label = f"{DATASET_PREFIX}{name}"
    create(worker_pod("reader", POLICY, pinned=True), namespace)
    procs.wait_for(
        lambda: phase(kubectl, namespace, "reader", "Running"), "the reader Running", timeout=90
    )
    assert (version / MARKER_FILE).is_file()

    create(evictor("evict-1", f"{name}-other", bucket), namespace)
    procs.wait_for(
        lambda: phase(kubectl, namespace, "evict-1", "Succeeded"), "the first evictor done"
    )
    assert (version / MARKER_FILE).is_file(), "a version in use was evicted"
    assert kubectl.json("get", "node", NODE)["metadata"]["labels"].get(label) == "v1"

    kubectl("delete", "pod", "reader", "-n", namespace, "--wait=true")
    leases = Path(cluster.nodes[NODE]["datasets"]) / ".topoplace-leases" / name / "v1"
    procs.wait_for(
        lambda: not [p for p in leases.iterdir() if not p.name.startswith(".")],
        "the agent dropping the reader's lease",
        timeout=60,
    )
    create(evictor("evict-2", f"{name}-other2", bucket), namespace)
    procs.wait_for(
        lambda: phase(kubectl, namespace, "evict-2", "Succeeded"), "the second evictor done"
    )
    assert not (version / MARKER_FILE).exists(), "a version no pod uses was kept over budget"
    procs.wait_for(
        lambda: label not in kubectl.json("get", "node", NODE)["metadata"]["labels"],
        f"the agent removing {label} from {NODE}",
        timeout=30,
    )
