"""Shared test configuration. Area-specific fixtures live in tests/<area>/conftest.py."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture
def repo_root() -> Path:
    return REPO_ROOT


@pytest.fixture
def python() -> str:
    """The interpreter running the tests, for invoking `python -m agent` / `python -m webhook`."""
    return sys.executable
