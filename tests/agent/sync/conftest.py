"""Fixtures for node sync: a protocol-faithful fake API server, a tiny sysfs tree and a cache."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from agent.discovery.discover import DiscoveryOptions
from tests.agent.sync.fake_apiserver import FakeApiServer
from tests.agent.sync.harness import make_tiny_sysfs

NODE = "gpu-node-7"


@pytest.fixture
async def apiserver(tmp_path: Path) -> AsyncIterator[FakeApiServer]:
    async with FakeApiServer(tmp_path) as server:
        yield server


@pytest.fixture
def sysfs_root(tmp_path: Path) -> Path:
    return make_tiny_sysfs(tmp_path / "sys")


@pytest.fixture
def dataset_root(tmp_path: Path) -> Path:
    root = tmp_path / "datasets"
    root.mkdir()
    return root


@pytest.fixture
def options(sysfs_root: Path, dataset_root: Path) -> DiscoveryOptions:
    return DiscoveryOptions(
        sysfs_root=sysfs_root,
        dataset_root=dataset_root,
        kubelet_config=None,
        use_nvml=False,
        per_device_labels=False,
    )
