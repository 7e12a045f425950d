"""docs/audit.md stays true: every verdict has its section, every metric and JSON key is
documented, and the table shown is what `topoplace-agent audit` prints for that assignment."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from agent.audit.locality import LOCALITY_VERDICTS
from agent.audit.monitor import AuditMetrics
from agent.audit.verdict import VERDICTS
from agent.cli.main import main
from tests.agent.audit.cgroupfs import CgroupFs, Container
from tests.agent.audit.kubelet_stub import FakeKubelet, container, devices, pod, short_socket_dir
from tests.agent.discovery.machines import build
from tests.docs.markdown import REPO, fenced_blocks, missing_lines

PAGE = REPO / "docs" / "audit.md"
GIB = 1 << 30
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
    assert len(names) == 9
    text = _text()
    assert [n for n in sorted(names) if f"`{n}" not in text] == []


# The measured locality: ml/a's and ml/b's cgroups (v2, systemd driver) and UIDs; ml/c's UID
# is not in the pod list, so it is unknown.
UIDS = {"a": "0a0a0a0a-1111-4222-8333-444444444444", "b": "0b0b0b0b-1111-4222-8333-444444444444"}
MEMORY = {"a": {0: 30 * GIB, 1: 2 * GIB}, "b": {0: 12 * GIB, 1: 4 * GIB}}


def _cgroups(root: Path, proc: Path) -> Path:
    fs = CgroupFs(root, proc)
    items = []
    for name, uid in UIDS.items():
        cid = f"{name * 8}{'0' * 56}"
        cpus = range(4, 8) if name == "a" else range(0, 224)
        fs.add_pod(uid, [Container(cid, cpus, [0, 1])], memory_bytes=MEMORY[name])
        items.append({"metadata": {"namespace": "ml", "name": name, "uid": uid},
                      "status": {"containerStatuses": [
                          {"name": "w", "containerID": f"containerd://{cid}"}]}})  # fmt: skip
    pods = root.parent / "pods.json"
    pods.write_text(json.dumps({"kind": "PodList", "items": items}))
    return pods


@pytest.fixture(scope="module")
def example(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, FakeKubelet, Path]]:
    root = build("dgx-h100", tmp_path_factory.mktemp("dgx") / "sys")
    pods = _cgroups(root, root.parent / "proc")
    with short_socket_dir(tmp_path_factory.mktemp("sock")) as where:
        kubelet = FakeKubelet(where / "kubelet.sock").start()
        kubelet.serve(*EXAMPLE)
        try:
            yield root, kubelet, pods
        finally:
            kubelet.stop()


def _audit(example: tuple[Path, FakeKubelet, Path], capsys: Any, *flags: str) -> str:
    root, kubelet, pods = example
    argv = ["audit", "--sysfs-root", str(root), "--no-nvml", "--proc-root",
            str(root.parent / "proc"), "--pod-resources-socket", str(kubelet.socket),
            "--pods", str(pods), *flags]  # fmt: skip
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
    doc = json.loads(_audit(example, capsys, "--output", "json"))
    locality = doc["locality"]
    keys = _keys({k: v for k, v in doc.items() if k not in ("counts", "locality")})
    keys |= set(doc["counts"]) - set(VERDICTS)
    keys |= _keys({k: v for k, v in locality.items() if k != "counts"}) | {"locality", "counts"}
    keys -= {str(n) for n in range(8)}  # memoryBytesByNumaNode's keys are NUMA node ids
    text = _text()
    assert sorted(k for k in keys if f"`{k}`" not in text) == []
    assert set(doc) == {"containers", "counts", "kubelet", "locality"}
    assert set(locality["counts"]) == set(LOCALITY_VERDICTS)
