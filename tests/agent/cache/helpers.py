"""Dataset trees for prefetch tests: build one, hash one."""

from __future__ import annotations

import hashlib
import os
from collections.abc import Mapping
from pathlib import Path

from common.cache_layout import MARKER_FILE, TEMP_PREFIX

__all__ = ["digests", "leftovers", "sample_tree", "tree_digests", "write_tree"]


def sample_tree() -> dict[str, bytes]:
    """A small dataset with nested prefixes, an empty file and a multi-chunk file."""
    rng = hashlib.sha256(b"topoplace").digest()
    blob = (rng * (9 * 1024 * 1024 // len(rng) + 1))[: 9 * 1024 * 1024 + 7]  # > one 8 MiB chunk
    return {
        "README.txt": b"imagenet subset\n",
        "train/shard-00000.tar": os.urandom(300_000),
        "train/shard-00001.tar": os.urandom(123_457),
        "train/deep/er/labels.json": b'{"cat": 1}',
        "val/empty.bin": b"",
        "val/big.bin": blob,
    }


def tree_digests(root: Path) -> dict[str, str]:
    """rel path -> sha256 for every file below root, the marker excepted."""
    out: dict[str, str] = {}
    for path in sorted(root.rglob("*")):
        if path.is_file() and path.name != MARKER_FILE:
            out[path.relative_to(root).as_posix()] = hashlib.sha256(path.read_bytes()).hexdigest()
    return out


def digests(files: Mapping[str, bytes]) -> dict[str, str]:
    return {rel: hashlib.sha256(data).hexdigest() for rel, data in files.items()}


def write_tree(root: Path, files: Mapping[str, bytes]) -> Path:
    for rel, data in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_bytes(data)
    return root


def leftovers(dataset_dir: Path) -> list[str]:
    """Temporary entries a writer left in a dataset directory."""
    if not dataset_dir.is_dir():
        return []
    return sorted(p.name for p in dataset_dir.iterdir() if p.name.startswith(TEMP_PREFIX))
