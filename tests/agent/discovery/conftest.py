"""Fixtures for discovery tests: kernel-faithful machines built once per session (read-only)
or fresh per test (for the tests that damage them).

Trees go to a memory-backed tmpfs when the machine has one: a DGX tree is ~3000 small files,
and on a busy disk creating them costs seconds where reading them back costs milliseconds.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from agent.discovery.discover import DiscoveryOptions
from tests.agent.discovery.machines import build

_TMPFS = Path("/dev/shm")


@pytest.fixture(scope="session")
def scratch(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    if _TMPFS.is_dir() and os.access(_TMPFS, os.W_OK):
        path = Path(tempfile.mkdtemp(prefix="topoplace-sysfs-", dir=_TMPFS))
        yield path
        shutil.rmtree(path, ignore_errors=True)
    else:
        yield tmp_path_factory.mktemp("sysfs")


@pytest.fixture(scope="session")
def built_machine(scratch: Path) -> Callable[[str], Path]:
    """A machine's sysfs root, built once per session: do not modify it."""
    built: dict[str, Path] = {}

    def get(name: str) -> Path:
        if name not in built:
            built[name] = build(name, Path(tempfile.mkdtemp(dir=scratch)) / name)
        return built[name]

    return get


@pytest.fixture
def fresh_machine(scratch: Path) -> Callable[[str], Path]:
    """A machine's sysfs root of this test's own, free to break."""
    return lambda name: build(name, Path(tempfile.mkdtemp(dir=scratch)) / name)


def _options(root: Path, **overrides: object) -> DiscoveryOptions:
    values: dict[str, object] = {
        "sysfs_root": root,
        "dataset_root": root.parent / "no-datasets",
        "use_nvml": False,
    }
    values.update(overrides)
    return DiscoveryOptions(**values)  # type: ignore[arg-type]


@pytest.fixture
def options() -> Callable[..., DiscoveryOptions]:
    """options(root, **overrides): a fixture tree, no NVML, an empty dataset root beside it."""
    return _options
