"""docs/audit.md stays true: every verdict has its section, every metric and JSON key is
documented, and the table shown is what `topoplace-agent audit` prints for that assignment."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from agent.audit.monitor import AuditMetrics
from agent.audit.verdict import VERDICTS
from agent.cli.main import main
from tests.agent.audit.kubelet_stub import FakeKubelet, container, devices, pod, short_socket_dir
from tests.agent.discovery.machines import build
from tests.docs.markdown import REPO, fenced_blocks, missing_lines

PAGE = REPO / "docs" / "audit.md"
EXAMPLE = (
    pod("ml", "a", container("w", devices("nvidia.com/gpu", ["0000:1b:00.0"]),
                             devices("rdma/ib", ["mlx5_0"]), cpus=range(4, 8))),
    pod("ml", "b", container("w", devices("nvidia.com/gpu", ["0000:df:00.0"]))),
    pod("ml", "c", container("w", devices("nvidia.com/gpu", ["0000:43:00.0"]),
                             devices("rdma/ib", ["mlx5_6"]), cpus=range(60, 64))),
)  # fmt: skip


def _text() -> str:
    return PAGE.read_text(encoding="utf-8")


def test_every_verdict_has_its_section() -> None:
    headings = re.findall(r"^### `([a-z-]+)`$", _text(), flags=re.M)
    assert sorted(headings) == sorted(VERDICTS)


def test_every_metric_is_documented() -> None:
    registry = CollectorRegistry()
    AuditMetrics(registry)
    names = {m.name for m in registry.collect()}
    assert len(names) == 4
    text = _text()
    assert [n for n in sorted(names) if f"`{n}" not in text] == []


@pytest.fixture(scope="module")
def example(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, FakeKubelet]]:
    root = build("dgx-h100", tmp_path_factory.mktemp("dgx") / "sys")
    with short_socket_dir(tmp_path_factory.mktemp("sock")) as where:
        kubelet = FakeKubelet(where / "kubelet.sock").start()
        kubelet.serve(*EXAMPLE)
        try:
            yield root, kubelet
        finally:
            kubelet.stop()


def _audit(example: tuple[Path, FakeKubelet], capsys: Any, *flags: str) -> str:
    root, kubelet = example
    argv = ["audit", "--sysfs-root", str(root), "--no-nvml",
            "--pod-resources-socket", str(kubelet.socket), *flags]  # fmt: skip
    assert main(argv) == 0
    return capsys.readouterr().out


def test_the_table_shown_is_the_real_output(example: Any, capsys: Any) -> None:
    (shown,) = [b for b in fenced_blocks(PAGE) if b.lang == "text"]
    assert missing_lines(shown.text, _audit(example, capsys)) == []


def _keys(value: Any) -> set[str]:
    if isinstance(value, dict):
        return set(value) | {k for v in value.values() for k in _keys(v)}
    if isinstance(value, list):
        return {k for v in value for k in _keys(v)}
    return set()


def test_every_json_key_is_documented(example: Any, capsys: Any) -> None:
    import json

    doc = json.loads(_audit(example, capsys, "--output", "json"))
    keys = _keys({k: v for k, v in doc.items() if k != "counts"}) | set(doc["counts"]) - set(
        VERDICTS
    )
    text = _text()
    assert sorted(k for k in keys if f"`{k}`" not in text) == []
    assert set(doc) == {"containers", "counts", "kubelet"}
