"""The extender fixture of the scheduler tests."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from tests.webhook.scheduler.extender_calls import Extender, running_extender


@pytest.fixture
async def extender() -> AsyncIterator[Extender]:
    async with running_extender() as running:
        yield running
