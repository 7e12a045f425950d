"""docs/labels.md stays true: every label key and annotation field is documented, and the
DGX H100 example output is what `topoplace-agent discover` really prints for that machine."""

from __future__ import annotations

import json
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from common.vocabulary import LINK_WORDS, TOPOLOGY_ANNOTATION, Label, gpu_device_labels
from tests.docs.markdown import REPO, commands, fenced_blocks, missing_lines, run_cli

PAGE = REPO / "docs" / "labels.md"
FIXTURE_DIR = "/tmp/dgx"  # the path the page uses; tests build the machine elsewhere


def _text() -> str:
    return PAGE.read_text(encoding="utf-8")


def test_every_node_label_key_is_documented() -> None:
    keys = [v for k, v in vars(Label).items() if k.isupper()]
    assert len(keys) >= 15
    text = _text()
    assert [k for k in keys if f"`{k}`" not in text] == []


def test_per_gpu_keys_and_prefixes_are_documented() -> None:
    text = _text()
    for key in gpu_device_labels(0):
        generic = key.replace("gpu-0-", "gpu-<i>-")
        assert generic != key
        assert f"`{generic}`" in text
    assert f"`{TOPOLOGY_ANNOTATION}`" in text
    assert "`dataset.topoplace.io/<name>`" in text
    assert "--per-device-labels" in text
    for word in LINK_WORDS:
        assert f"| `{word}` |" in text


@pytest.fixture(scope="module")
def dgx(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The DGX H100 sysfs tree, built by the very command the page shows."""
    root = tmp_path_factory.mktemp("dgx")
    (setup,) = [
        line
        for b in fenced_blocks(PAGE)
        if b.lang == "sh"
        for line in b.text.splitlines()
        if "tests.agent.discovery.machines" in line
    ]
    env_assignment, python, flag, code = shlex.split(setup)
    assert (env_assignment, python, flag) == ("PYTHONPATH=.", "python", "-c")
    subprocess.run(
        [sys.executable, "-c", code.replace(FIXTURE_DIR, str(root))],
        cwd=REPO,
        env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"},
        check=True,
        timeout=60,
    )
    return root


_COMMANDS = commands(PAGE)


def test_the_page_shows_a_discover_command() -> None:
    assert any(c.argv[:2] == ("topoplace-agent", "discover") for c in _COMMANDS)


@pytest.mark.parametrize("command", _COMMANDS, ids=lambda c: f"line{c.line}")
def test_command_runs_and_shows_its_real_output(command: Any, dgx: Path) -> None:
    argv = [str(dgx) if token == FIXTURE_DIR else token for token in command.argv]
    result = run_cli(argv)
    assert result.returncode == 0, result.stderr
    if command.shown is not None:
        assert missing_lines(command.shown.text, result.stdout) == []


def _keys(value: Any) -> set[str]:
    if isinstance(value, dict):
        return set(value) | {k for v in value.values() for k in _keys(v)}
    if isinstance(value, list):
        return {k for v in value for k in _keys(v)}
    return set()


def test_annotation_fields_are_documented(dgx: Path) -> None:
    result = run_cli(
        ["topoplace-agent", "discover", "--sysfs-root", str(dgx), "--no-nvml", "--output", "json"]
    )
    assert result.returncode == 0, result.stderr
    annotation = json.loads(json.loads(result.stdout)["annotations"][TOPOLOGY_ANNOTATION])
    text = _text()
    assert sorted(k for k in _keys(annotation) if f"`{k}`" not in text) == []
    # The excerpt on the page is a faithful cut of the real document.
    (excerpt,) = [b for b in fenced_blocks(PAGE) if b.lang == "json"]
    shown = json.loads(excerpt.text)
    assert set(shown) == set(annotation)
    for key, items in shown.items():
        real = annotation[key]
        assert [i for i in items if i != "…" and i not in real] == []
