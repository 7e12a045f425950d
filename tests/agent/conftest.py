"""Fixtures every agent test may use: a kubelet PodResources server over the real gRPC
protocol."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.agent.audit.kubelet_stub import FakeKubelet, short_socket_dir


@pytest.fixture
def kubelet(tmp_path: Path) -> Iterator[FakeKubelet]:
    with short_socket_dir(tmp_path) as where:
        server = FakeKubelet(where / "kubelet.sock").start()
        try:
            yield server
        finally:
            server.stop()
