"""Every shell block of README.md and docs/*.md, where it runs, and how it is run.

A ```sh (bash, shell, console) block runs offline, in a temporary copy of the repository, unless
an HTML comment on the line(s) before its fence says otherwise:
- `<!-- docs-test: cluster -->`: it needs a cluster; `make e2e` runs it on its cluster
  (tests/e2e/test_docs_blocks.py), where `make cluster`, `make cluster-down` and `export`
  lines are the harness's own and the placeholders NODE and AGENT_POD get real names;
- `<!-- docs-test: manual (REASON) -->`: no test runs it (it changes a real installation or
  pushes to a registry); the reason is required.
Other tags: `<!-- exit: N -->` the exit status the block ends with (default 0);
`<!-- file: NAME -->` on any other block: its text is written to NAME in the copy (or the
cluster run's directory) before the page's shell blocks run, for a page that says "save as".
A ```text block right after a shell block is what it shows: its lines must appear, in order, in
what a terminal shows (stdout and stderr together); `…` lines stand for lines left out. Only
key lines are compared, never whole outputs: the page tests (test_*_doc.py) do that where a page
promises a whole output. In a ```console block only `$ ` lines are commands.

`python -m tests.docs.shell_blocks` prints how many blocks run where.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from tests.docs.markdown import REPO, Block, fenced_blocks, missing_lines

__all__ = [
    "CLUSTER",
    "MANUAL",
    "NEEDS_CLUSTER",
    "OFFLINE",
    "PageBlock",
    "check",
    "page_blocks",
    "pages",
    "repository_copy",
    "run_script",
    "script_of",
    "write_files",
]

OFFLINE, CLUSTER, MANUAL = "offline", "cluster", "manual"
SHELLS = frozenset({"sh", "bash", "shell", "console"})
# A command that only a cluster answers: such a block must be tagged.
NEEDS_CLUSTER = re.compile(
    r"(^|[\s;|&(])(kubectl|helm|docker|podman)\s|--kubeconfig|make (cluster|e2e|image)\b", re.M
)
_MANUAL = re.compile(r"^manual \((.+)\)$")


@dataclass(frozen=True, slots=True)
class PageBlock:
    page: Path
    block: Block
    where: str  # OFFLINE, CLUSTER or MANUAL
    exit: int
    shown: Block | None  # the ```text block after it

    @property
    def name(self) -> str:
        return f"{self.page.relative_to(REPO)}:{self.block.line}"


def pages() -> list[Path]:
    return [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]


def _where(block: Block) -> str:
    tag = block.tagged("docs-test")
    if tag is None:
        return OFFLINE
    if tag == CLUSTER:
        return CLUSTER
    if _MANUAL.match(tag):
        return MANUAL
    raise ValueError(f"line {block.line}: unknown docs-test tag {tag!r}")


def page_blocks(page: Path) -> list[PageBlock]:
    blocks = fenced_blocks(page)
    found = []
    for position, block in enumerate(blocks):
        if block.lang not in SHELLS:
            continue
        following = blocks[position + 1] if position + 1 < len(blocks) else None
        shown = following if following is not None and following.lang == "text" else None
        exit_tag = block.tagged("exit")
        found.append(
            PageBlock(page, block, _where(block), int(exit_tag or 0), shown)  # type: ignore[arg-type]
        )
    return found


def script_of(block: Block) -> str:
    """The block as a script: in a console block only the `$ ` lines."""
    if block.lang != "console":
        return block.text
    return "".join(ln[2:] + "\n" for ln in block.text.splitlines() if ln.startswith("$ "))


def write_files(page: Path, where: Path) -> list[str]:
    """Write the page's `file:`-tagged blocks into `where`; their names."""
    names = []
    for block in fenced_blocks(page):
        name = block.tagged("file")
        if name:
            (where / name).write_text(block.text, encoding="utf-8")
            names.append(name)
    return names


def repository_copy(into: Path) -> Path:
    """The files git would commit (tracked and new, not ignored), modification times kept, and
    the virtual environment linked in (so `make demo` finds it built)."""
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=REPO,
        capture_output=True,
        check=True,
    ).stdout.decode()
    for name in filter(None, listed.split("\0")):
        source = REPO / name
        if not source.is_file():
            continue  # deleted in the work tree
        target = into / name
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(source, target)
    venv = REPO / ".venv"
    if venv.is_dir():
        (into / ".venv").symlink_to(venv)
    return into


def run_script(
    text: str, *, cwd: Path, env: dict[str, str] | None = None, timeout: float = 180
) -> tuple[int, str]:
    """Run a block with bash as a reader would paste it (errexit, pipefail); the exit status
    and what the terminal shows."""
    bin_dir = str(Path(sys.executable).parent)
    done = subprocess.run(
        ["bash", "-e", "-o", "pipefail", "-c", text],
        cwd=cwd,
        env={**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}"}
        | (env or {}),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        timeout=timeout,
        check=False,
    )
    return done.returncode, done.stdout


def check(entry: PageBlock, returncode: int, output: str) -> list[str]:
    """What is wrong with one run of a block (empty: the page is true)."""
    problems = []
    if returncode != entry.exit:
        problems.append(f"exit {returncode}, the page expects {entry.exit}")
    if entry.shown is not None:
        missing = missing_lines(entry.shown.text + "…\n", output)
        if missing:
            problems.append(f"shown output line not printed: {missing[0]!r}")
    if problems:
        tail = "\n".join(output.splitlines()[-15:])
        return [f"{entry.name}: {'; '.join(problems)}\n{tail}"]
    return []


if __name__ == "__main__":
    counts = Counter(e.where for p in pages() for e in page_blocks(p))
    print(
        f"shell blocks: {counts[OFFLINE]} offline (tests/docs/test_shell_blocks.py), "
        f"{counts[CLUSTER]} on the cluster (tests/e2e/test_docs_blocks.py), "
        f"{counts[MANUAL]} manual"
    )
