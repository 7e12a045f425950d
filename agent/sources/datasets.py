"""Datasets source: complete cached versions under the dataset cache root.

A version is complete when its marker file exists (common.cache_layout). The newest is the one
whose marker says it completed last; equal or unreadable times fall back to the version string,
so the answer never depends on directory order.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from common.cache_layout import LOCK_FILE, TEMP_PREFIX, dataset_dir, marker_path

__all__ = ["CachedVersion", "DatasetCache", "discover"]

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class CachedVersion:
    version: str
    completed_at: datetime | None  # from the marker; None when it gives no usable time

    def sort_key(self) -> tuple[float, str]:
        stamp = self.completed_at.timestamp() if self.completed_at else float("-inf")
        return (stamp, self.version)


@dataclass(frozen=True, slots=True)
class DatasetCache:
    versions: Mapping[str, tuple[CachedVersion, ...]]  # name -> complete versions, oldest first

    @property
    def newest(self) -> Mapping[str, str]:
        return {name: vs[-1].version for name, vs in self.versions.items() if vs}


def _subdirs(path: Path) -> list[str]:
    try:
        with os.scandir(path) as it:
            return sorted(
                e.name
                for e in it
                if e.is_dir() and not e.name.startswith((".", TEMP_PREFIX)) and e.name != LOCK_FILE
            )
    except OSError:
        return []


def _parse_time(value: object) -> datetime | None:
    if not isinstance(value, str):
        return None
    try:
        stamp = datetime.fromisoformat(value)
    except ValueError:
        return None
    return stamp if stamp.tzinfo else stamp.replace(tzinfo=UTC)


def _read_marker(marker: Path, version: str) -> CachedVersion | None:
    """The version's record when its marker exists (complete), else None."""
    try:
        text = marker.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None
    except (OSError, UnicodeDecodeError) as e:
        log.warning("dataset marker %s unreadable, version counted complete: %s", marker, e)
        return CachedVersion(version=version, completed_at=None)
    try:
        doc = json.loads(text)
    except ValueError:
        doc = None
    stamp = _parse_time(doc.get("completed_at") if isinstance(doc, dict) else None)
    if stamp is None:
        log.warning("dataset marker %s has no usable completed_at, ordered by version", marker)
    return CachedVersion(version=version, completed_at=stamp)


def discover(root: Path) -> DatasetCache:
    if not root.is_dir():
        return DatasetCache(versions={})
    versions: dict[str, tuple[CachedVersion, ...]] = {}
    for name in _subdirs(root):
        found = [
            record
            for version in _subdirs(dataset_dir(root, name))
            if (record := _read_marker(marker_path(root, name, version), version)) is not None
        ]
        if found:
            versions[name] = tuple(sorted(found, key=CachedVersion.sort_key))
    return DatasetCache(versions=versions)
