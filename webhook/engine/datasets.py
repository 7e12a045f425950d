"""Dataset cache wiring: one hostPath volume for the cache root, the prefetch init container,
read-only subPath mounts of the version directory in workers.

Layout (common/cache_layout.py): `<cache-root>/<name>/<version>/`. The cache root is a hostPath
of type Directory: the agent DaemonSet creates it and hands it to CACHE_OWNER, the user the
prefetch container runs as here. A DirectoryOrCreate path would instead be made root-owned by
the kubelet before any init container runs, and a non-root prefetcher could not write it.
Prefetchers mount the whole root read-write (they lock, stage and evict under it); workers
mount only `<name>/<version>` read-only through subPath, which the kubelet resolves when the
worker starts, after the prefetch init containers have finished.
"""

from __future__ import annotations

import functools
import hashlib
import re
from pathlib import Path

from common.cache_layout import CACHE_OWNER, PREFETCH_CONTAINER_PREFIX
from webhook.engine.pod_fields import Container, PodSpec
from webhook.engine.resources import PREFETCH_CPU, PREFETCH_MEMORY
from webhook.policy.model import Dataset

__all__ = ["CACHE_VOLUME", "add_datasets", "prefetch_container_name", "version_subpath"]

# One volume for every dataset of the pod; its name is reserved for Topoplace.
CACHE_VOLUME = "topoplace-datasets"
_NOT_DNS = re.compile(r"[^a-z0-9-]+")
_SLUG_MAX = 30


@functools.lru_cache(maxsize=4096)  # pure; saves hashing on every admission
def _dns_name(prefix: str, *parts: str) -> str:
    """Deterministic DNS-1123 label ≤ 63 chars: readable slug + hash of the exact parts."""
    slug = _NOT_DNS.sub("-", parts[0].lower()).strip("-")[:_SLUG_MAX].strip("-")
    digest = hashlib.sha256("\0".join(parts).encode()).hexdigest()[:8]
    return f"{prefix}-{slug}-{digest}" if slug else f"{prefix}-{digest}"


def prefetch_container_name(dataset: Dataset) -> str:
    return _dns_name(PREFETCH_CONTAINER_PREFIX, dataset.name)


def version_subpath(dataset: Dataset) -> str:
    """`<name>/<version>` relative to the cache root (both are label-safe: no `..`, no `/`)."""
    return f"{dataset.name}/{dataset.version}"


def add_datasets(
    spec: PodSpec,
    datasets: list[Dataset],
    workers: list[Container],
    *,
    cache_root: Path,
    image: str,
    warnings: list[str],
    max_cache_bytes: int | None = None,
) -> list[Container]:
    """Wire the datasets into the pod; returns the prefetch init containers it added."""
    if not datasets or not workers:
        return []  # nobody would read the data: no volumes, no download
    root = str(cache_root)
    volumes = spec.get("volumes") or []
    mine = next((v for v in volumes if v.get("name") == CACHE_VOLUME), None)
    if mine is None:
        volume = {"name": CACHE_VOLUME, "hostPath": {"path": root, "type": "Directory"}}
        spec["volumes"] = [*volumes, volume]
    elif mine.get("hostPath", {}).get("path") != root:
        warnings.append(
            f"volume {CACHE_VOLUME} is reserved for the dataset cache and the pod defines it "
            "differently; datasets not mounted"
        )
        return []
    prefetchers = [
        _prefetch_container(dataset, root=root, image=image, bound=max_cache_bytes)
        for dataset in datasets
        if dataset.prefetch
    ]
    for dataset in datasets:
        for worker in workers:
            _mount(worker, dataset, warnings)
    return _insert_init(spec, prefetchers)


def _mount(worker: Container, dataset: Dataset, warnings: list[str]) -> None:
    mounts = worker.get("volumeMounts") or []
    subpath = version_subpath(dataset)
    for mount in mounts:
        if mount.get("name") == CACHE_VOLUME and mount.get("subPath") == subpath:
            return
        if mount.get("mountPath", "").rstrip("/") == dataset.mount_path.rstrip("/"):
            warnings.append(
                f"container {worker.get('name', '?')}: already mounts {mount.get('name')} at "
                f"{dataset.mount_path}; dataset {dataset.name} not mounted there"
            )
            return
    mount = {
        "name": CACHE_VOLUME,
        "mountPath": dataset.mount_path,
        "subPath": subpath,
        "readOnly": True,
    }
    worker["volumeMounts"] = [*mounts, mount]


def _prefetch_container(dataset: Dataset, *, root: str, image: str, bound: int | None) -> Container:
    amount = {"cpu": PREFETCH_CPU, "memory": PREFETCH_MEMORY}
    uid, gid = CACHE_OWNER
    container: Container = {
        "name": prefetch_container_name(dataset),
        "image": image,
        "command": [
            "topoplace-agent",
            "prefetch",
            "--dataset",
            dataset.name,
            "--version",
            dataset.version,
            "--source",
            dataset.source,
            "--cache-root",
            root,
            *(("--max-cache-bytes", str(bound)) if bound is not None else ()),
        ],
        # The pod's UID names its lease on the version, so no eviction removes it in use.
        "env": [
            {"name": "TOPOPLACE_POD_UID", "valueFrom": {"fieldRef": {"fieldPath": "metadata.uid"}}}
        ],
        "resources": {"requests": dict(amount), "limits": dict(amount)},
        "volumeMounts": [{"name": CACHE_VOLUME, "mountPath": root}],
        # The cache owner, whatever the pod runs as: files in the shared cache keep one owner
        # so the next pod's prefetcher can lock, replace and evict them. No privilege at all.
        "securityContext": {
            "runAsUser": uid,
            "runAsGroup": gid,
            "runAsNonRoot": True,
            "allowPrivilegeEscalation": False,
            "privileged": False,
            "capabilities": {"drop": ["ALL"]},
            "seccompProfile": {"type": "RuntimeDefault"},
        },
    }
    if dataset.source_secret:
        # Endpoint and credentials from a Secret in the pod's own namespace: nothing the pod's
        # author could not mount already.
        container["envFrom"] = [{"secretRef": {"name": dataset.source_secret}}]
    return container


def _insert_init(spec: PodSpec, prefetchers: list[Container]) -> list[Container]:
    """Prefetchers run first, before user init containers (and sidecars) in dataset order."""
    existing = spec.get("initContainers") or []
    names = {c.get("name") for c in existing}
    new = [c for c in prefetchers if c["name"] not in names]
    if new:
        spec["initContainers"] = [*new, *existing]
    return new
