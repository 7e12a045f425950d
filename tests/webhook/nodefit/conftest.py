"""The fleet of real machine classes as `kubectl get nodes -o yaml` prints it.

Read from docs/examples/nodes.yaml (what tests.webhook.nodefit.fleet writes); the slow test
test_example_fleet_is_what_discovery_reports rebuilds it from the sysfs trees and compares.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

REPO = Path(__file__).resolve().parents[3]
POLICIES = REPO / "policies"
EXAMPLE_NODES = REPO / "docs" / "examples" / "nodes.yaml"


@pytest.fixture(scope="session")
def nodes_yaml() -> Path:
    return EXAMPLE_NODES


@pytest.fixture(scope="session")
def nodes(nodes_yaml: Path) -> list[dict[str, Any]]:
    return yaml.safe_load(nodes_yaml.read_text())["items"]
