"""The shell blocks README.md and docs/*.md mark `<!-- docs-test: cluster -->` run as shown on
make e2e's cluster: page by page, in a temporary copy of the repository, with the cluster's
kubectl and kubeconfig, ending with the exit status the page gives and printing the key lines
it shows (tests/docs/shell_blocks.py has the conventions; the offline blocks run in
tests/docs/test_shell_blocks.py).

`make cluster`, `make cluster-down` and `export` lines are this harness's own (the cluster is
up already); the placeholder NODE becomes a DGX H100 node. Namespaces a page creates are
deleted after it, so the next page may create them again.
"""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path

import pytest

from e2e.cluster import Cluster
from e2e.kube import Kubectl
from tests.docs.shell_blocks import (
    CLUSTER,
    check,
    page_blocks,
    pages,
    repository_copy,
    run_script,
    script_of,
    write_files,
)

_HARNESS = re.compile(r"^\s*(make cluster(-down)?|export)\b")
_NAMESPACE = re.compile(r"kubectl create namespace (\S+)")
_PAGES = [p for p in pages() if any(e.where == CLUSTER for e in page_blocks(p))]


def _script(text: str, node: str) -> str:
    kept = [ln for ln in text.splitlines() if not _HARNESS.match(ln)]
    return re.sub(r"\bNODE\b", node, "\n".join(kept) + "\n")


def _has_kueue(kubectl: Kubectl) -> bool:
    found = kubectl.run("get", "crd", "clusterqueues.kueue.x-k8s.io", check=False)
    return found.returncode == 0


@pytest.fixture(scope="module")
def copy(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return repository_copy(tmp_path_factory.mktemp("clone"))


def test_every_cluster_block_is_collected() -> None:
    assert sum(e.where == CLUSTER for p in _PAGES for e in page_blocks(p)) >= 8


@pytest.mark.parametrize("page", _PAGES, ids=lambda p: p.name)
def test_cluster_blocks_run_as_shown(
    page: Path, copy: Path, cluster: Cluster, kubectl: Kubectl
) -> None:
    if page.name == "kueue.md" and not _has_kueue(kubectl):
        pytest.skip("Kueue is not running (TOPOPLACE_E2E_KUEUE=0)")
    node = next(n for n in sorted(cluster.nodes) if n.startswith("dgx-h100"))
    env = {
        "KUBECONFIG": str(cluster.kubeconfig),
        "PATH": os.pathsep.join(
            [str(cluster.bin), str(Path(sys.executable).parent), os.environ.get("PATH", "")]
        ),
        "TOPOPLACE_E2E_STATE": str(cluster.state),
    }
    write_files(page, copy)
    created: list[str] = []
    problems: list[str] = []
    try:
        for entry in page_blocks(page):
            if entry.where != CLUSTER:
                continue
            text = _script(script_of(entry.block), node)
            created += _NAMESPACE.findall(text)
            returncode, output = run_script(text, cwd=copy, env=env, timeout=300)
            problems += check(entry, returncode, output)
    finally:
        for name in dict.fromkeys(created):
            kubectl.run(
                "delete",
                "namespace",
                name,
                "--wait=true",
                "--timeout=180s",
                check=False,
                timeout=200,
            )
    assert problems == [], "\n\n".join(problems)
