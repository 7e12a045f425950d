"""The example fleet is what the agent's discovery reports on those machine classes."""

from __future__ import annotations

import pytest
import yaml

from tests.webhook.nodefit.conftest import EXAMPLE_NODES
from tests.webhook.nodefit.fleet import as_list, fleet


@pytest.mark.slow  # builds eight sysfs trees (seconds each)
def test_example_fleet_is_what_discovery_reports() -> None:
    written = yaml.safe_load(EXAMPLE_NODES.read_text())
    assert written == as_list(fleet()), (
        "docs/examples/nodes.yaml is stale: python -m tests.webhook.nodefit.fleet > "
        "docs/examples/nodes.yaml"
    )
