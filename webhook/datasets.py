"""Dataset cache wiring: hostPath volumes, the prefetch init container, read-only mounts.

Layout (agent/cache_layout.py): `<cache-root>/<name>/<version>/`. The prefetch init container
mounts `<cache-root>/<name>` read-write; workers mount `<version>` read-only at `mountPath`.
Both hostPaths use DirectoryOrCreate: the kubelet checks hostPath types when it sets up the
pod's volumes, before any init container runs, so the version directory may not exist yet.
"""

from __future__ import annotations

import functools
import hashlib
import re
from pathlib import Path
from typing import Any

from agent.cache_layout import dataset_dir, version_dir
from webhook.policy import Dataset
from webhook.resources import PREFETCH_CPU, PREFETCH_MEMORY

__all__ = ["add_datasets", "cache_volume_name", "data_volume_name", "prefetch_container_name"]

_NOT_DNS = re.compile(r"[^a-z0-9-]+")
_SLUG_MAX = 30


@functools.lru_cache(maxsize=4096)  # pure; saves hashing on every admission
def _dns_name(prefix: str, *parts: str) -> str:
    """Deterministic DNS-1123 label ≤ 63 chars: readable slug + hash of the exact parts."""
    slug = _NOT_DNS.sub("-", parts[0].lower()).strip("-")[:_SLUG_MAX].strip("-")
    digest = hashlib.sha256("\0".join(parts).encode()).hexdigest()[:8]
    return f"{prefix}-{slug}-{digest}" if slug else f"{prefix}-{digest}"


def cache_volume_name(dataset: Dataset) -> str:
    return _dns_name("topoplace-cache", dataset.name)


def data_volume_name(dataset: Dataset) -> str:
    return _dns_name("topoplace-data", dataset.name, dataset.version)


def prefetch_container_name(dataset: Dataset) -> str:
    return _dns_name("topoplace-prefetch", dataset.name)


def add_datasets(
    spec: dict[str, Any],
    datasets: list[Dataset],
    workers: list[dict[str, Any]],
    *,
    cache_root: Path,
    image: str,
    warnings: list[str],
) -> None:
    if not datasets or not workers:
        return  # nobody would read the data: no volumes, no download
    volumes = list(spec.get("volumes") or [])
    have_volumes = {v.get("name") for v in volumes}
    prefetchers: list[dict[str, Any]] = []
    for dataset in datasets:
        wanted = [
            {
                "name": data_volume_name(dataset),
                "hostPath": {
                    "path": _host_path(cache_root, dataset.name, dataset.version),
                    "type": "DirectoryOrCreate",
                },
            }
        ]
        if dataset.prefetch:
            wanted.append(
                {
                    "name": cache_volume_name(dataset),
                    "hostPath": {
                        "path": _host_path(cache_root, dataset.name),
                        "type": "DirectoryOrCreate",
                    },
                }
            )
            prefetchers.append(_prefetch_container(dataset, cache_root=cache_root, image=image))
        for volume in wanted:
            if volume["name"] not in have_volumes:
                volumes.append(volume)
                have_volumes.add(volume["name"])
        for worker in workers:
            _mount(worker, dataset, warnings)
    if volumes != (spec.get("volumes") or []):
        spec["volumes"] = volumes
    _insert_init(spec, prefetchers)


@functools.lru_cache(maxsize=4096)
def _host_path(cache_root: Path, name: str, version: str | None = None) -> str:
    if version is None:
        return str(dataset_dir(cache_root, name))
    return str(version_dir(cache_root, name, version))


@functools.lru_cache(maxsize=64)
def _host_root(cache_root: Path) -> str:
    return str(cache_root)


def _mount(worker: dict[str, Any], dataset: Dataset, warnings: list[str]) -> None:
    mounts = worker.get("volumeMounts") or []
    name = data_volume_name(dataset)
    for mount in mounts:
        if mount.get("name") == name:
            return
        if mount.get("mountPath", "").rstrip("/") == dataset.mount_path.rstrip("/"):
            warnings.append(
                f"container {worker.get('name', '?')}: already mounts {mount.get('name')} at "
                f"{dataset.mount_path}; dataset {dataset.name} not mounted there"
            )
            return
    mount = {"name": name, "mountPath": dataset.mount_path, "readOnly": True}
    worker["volumeMounts"] = [*mounts, mount]


def _prefetch_container(dataset: Dataset, *, cache_root: Path, image: str) -> dict[str, Any]:
    amount = {"cpu": PREFETCH_CPU, "memory": PREFETCH_MEMORY}
    return {
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
            _host_root(cache_root),
        ],
        "resources": {"requests": dict(amount), "limits": dict(amount)},
        "volumeMounts": [
            {"name": cache_volume_name(dataset), "mountPath": _host_path(cache_root, dataset.name)}
        ],
        # No privilege; the user is left to the pod so runAsNonRoot pods stay admissible.
        "securityContext": {
            "allowPrivilegeEscalation": False,
            "privileged": False,
            "capabilities": {"drop": ["ALL"]},
            "seccompProfile": {"type": "RuntimeDefault"},
        },
    }


def _insert_init(spec: dict[str, Any], prefetchers: list[dict[str, Any]]) -> None:
    """Prefetchers run first, before user init containers (and sidecars) in dataset order."""
    existing = spec.get("initContainers") or []
    names = {c.get("name") for c in existing}
    new = [c for c in prefetchers if c["name"] not in names]
    if new:
        spec["initContainers"] = [*new, *existing]
