"""`make demo`, as README.md's first screen shows it, from a copy of the repository: it tells
its story in one screen per step, writes the full outputs to the files it names, and ends with
a summary that says what it showed, the flagship policy's GPU↔NIC promise included."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.docs.shell_blocks import repository_copy, run_script

STEPS = 6
SCREEN = 40  # lines a step may print: one screen


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, int, str]:
    copy = repository_copy(tmp_path_factory.mktemp("clone"))
    returncode, output = run_script("make demo", cwd=copy, env={"COLUMNS": "120"}, timeout=300)
    return copy, returncode, output


def test_it_runs_and_prints_no_setup_noise(demo: tuple[Path, int, str]) -> None:
    _, returncode, output = demo
    assert returncode == 0, output[-3000:]
    assert "Warning" not in output.split("== 1/6")[0]  # no pip or setuptools box before step 1
    assert "Traceback" not in output


def test_one_screen_per_step(demo: tuple[Path, int, str]) -> None:
    _, _, output = demo
    steps = re.split(r"^== \d/6 ", output, flags=re.M)[1:]
    assert len(steps) == STEPS
    for text in steps:
        lines = text.split("== Summary ==")[0].splitlines()
        assert len(lines) <= SCREEN, lines[0]
        assert lines[1].startswith("Shows: ") and lines[2].startswith("Why: "), lines[:3]


def test_the_full_outputs_are_in_the_files_it_names(demo: tuple[Path, int, str]) -> None:
    copy, _, output = demo
    named = set(re.findall(r"→ (demo-out/[\w./-]+\w)", output))
    assert len(named) >= 8
    for name in named:
        assert (copy / name).stat().st_size > 0, name
    assert "nodeSelectorTerms" in (copy / "demo-out/mutate-jobset-ddp.diff").read_text()


def test_the_summary_says_what_it_showed(demo: tuple[Path, int, str]) -> None:
    _, _, output = demo
    summary = output.split("== Summary ==")[1]
    assert "policies checked   3 policies in 3 files OK" in summary
    assert "pods mutated       4 example workloads" in summary
    assert "explain found      ddp-hgx-full-node, 8 GPUs: 2 of 12 nodes fit" in summary
    # The flagship promise where the hardware keeps it, and plainly where it does not.
    assert "GPU↔NIC pairs      kept on dgx-h100-a; not on dgx-h100-b: " in summary
    assert "4 storage/management" in summary
