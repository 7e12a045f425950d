"""Fixtures for discovery tests: kernel-faithful machines built once per session (read-only)
or fresh per test (for the tests that damage them)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from agent.discovery import DiscoveryOptions
from tests.agent.machines import build

_BUILT: dict[str, Path] = {}


@pytest.fixture(scope="session")
def built_machine(tmp_path_factory: pytest.TempPathFactory) -> Callable[[str], Path]:
    """A machine's sysfs root, built once per session: do not modify it."""

    def get(name: str) -> Path:
        if name not in _BUILT:
            _BUILT[name] = build(name, tmp_path_factory.mktemp(name))
        return _BUILT[name]

    return get


@pytest.fixture
def fresh_machine(tmp_path: Path) -> Callable[[str], Path]:
    """A machine's sysfs root of this test's own, free to break."""
    return lambda name: build(name, tmp_path / name)


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
