"""Every command README.md and docs/*.md show runs as shown: each offline shell block runs,
page by page in order, in a temporary copy of the repository, ends with the exit status the
page gives (0 unless tagged) and prints the key lines it shows (tests/docs/shell_blocks.py
has the conventions). Blocks that need a cluster run in tests/e2e/test_docs_blocks.py."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.docs.shell_blocks import (
    MANUAL,
    NEEDS_CLUSTER,
    OFFLINE,
    check,
    page_blocks,
    pages,
    repository_copy,
    run_script,
    script_of,
    write_files,
)

_PAGES = [p for p in pages() if any(e.where == OFFLINE for e in page_blocks(p))]


def test_every_page_is_read_and_every_block_placed() -> None:
    entries = [e for p in pages() for e in page_blocks(p)]
    assert len({e.page for e in entries}) >= 8
    offline = [e for e in entries if e.where == OFFLINE]
    untagged = [e.name for e in offline if NEEDS_CLUSTER.search(e.block.text)]
    assert untagged == [], "needs a cluster: tag it <!-- docs-test: cluster --> or manual (…)"
    assert sum(e.where == OFFLINE for e in entries) >= 12


def test_no_block_is_left_out_without_a_reason() -> None:
    for entry in (e for p in pages() for e in page_blocks(p) if e.where == MANUAL):
        reason = entry.block.tagged("docs-test") or ""
        assert len(reason) > len("manual ()") + 10, entry.name


@pytest.fixture(scope="module")
def copy(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return repository_copy(tmp_path_factory.mktemp("clone"))


@pytest.mark.parametrize("page", _PAGES, ids=lambda p: p.name)
def test_offline_blocks_run_as_shown(page: Path, copy: Path, tmp_path: Path) -> None:
    write_files(page, copy)
    problems: list[str] = []
    for entry in page_blocks(page):
        if entry.where != OFFLINE:
            continue
        # Pages build scratch trees under /tmp; here each run gets its own.
        text = script_of(entry.block).replace("/tmp/", f"{tmp_path}/")
        returncode, output = run_script(text, cwd=copy)
        problems += check(entry, returncode, output)
    assert problems == [], "\n\n".join(problems)
