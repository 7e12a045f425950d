"""docs/troubleshooting.md stays true: every offline `explain` shown is run and its output
(and exit status) matches, the admission warning shown is the one the node cache builds for
that pod, and every key of the JSON output is documented."""

from __future__ import annotations

import shlex
from pathlib import Path

import pytest
import yaml

from tests.docs.markdown import REPO, Block, fenced_blocks, missing_lines, run_cli
from webhook.cli.explain.render import to_json
from webhook.engine.recipe import mutate
from webhook.nodefit.checks import plan_for
from webhook.nodefit.explanation import explain_pod
from webhook.nodefit.node_index import NodeIndex
from webhook.placement_model.filters.nodes import node_views
from webhook.policy.loader import load_policy_dir
from webhook.warnings.hardware import no_fit_warning
from webhook.warnings.lines import shorten
from webhook.workloads.templates import pod_templates

PAGE = REPO / "docs" / "troubleshooting.md"
NODES = REPO / "docs" / "examples" / "nodes.yaml"
POLICIES = load_policy_dir(REPO / "policies")


def _explains() -> list[tuple[tuple[str, ...], Block, Block | None]]:
    """(argv, its sh block, the text block after it) for each offline explain on the page."""
    blocks = fenced_blocks(PAGE)
    found = []
    for position, block in enumerate(blocks):
        if block.lang != "sh":
            continue
        for line in block.text.splitlines():
            argv = tuple(shlex.split(line, comments=True))
            if argv[:2] == ("topoplace-webhook", "explain") and "--nodes" in argv:
                after = blocks[position + 1] if position + 1 < len(blocks) else None
                found.append((argv, block, after if after and after.lang == "text" else None))
    return found


EXPLAINS = _explains()


def test_the_page_shows_explain_runs() -> None:
    assert len(EXPLAINS) >= 4 and all(shown is not None for *_, shown in EXPLAINS[1:])


@pytest.mark.parametrize(("argv", "block", "shown"), EXPLAINS, ids=lambda v: str(v)[:60])
def test_every_explain_shown_is_what_it_prints(
    argv: tuple[str, ...], block: Block, shown: Block | None
) -> None:
    if "nodes.yaml" in argv and not (REPO / argv[argv.index("--nodes") + 1]).exists():
        pytest.skip("the page's generic `kubectl get nodes` example, not a file here")
    run = run_cli(argv)
    expected = int(block.tag[1]) if block.tag and block.tag[0] == "exit" else 0
    assert run.returncode == expected, run.stderr
    if shown is not None:
        assert missing_lines(shown.text, run.stdout) == [], f"line {shown.line}"


def test_the_warning_shown_is_the_node_caches() -> None:
    (block,) = [b for b in fenced_blocks(PAGE) if b.tag and b.tag[0] == "warning"]
    job = yaml.safe_load((REPO / block.tag[1]).read_text())
    (template,) = pod_templates(job)
    result = mutate(template.pod, job["metadata"]["namespace"], POLICIES)
    plan = plan_for(result.pod, result.applied)
    index = NodeIndex(node_views(yaml.safe_load_all(NODES.read_text())))
    parts = no_fit_warning(plan, index.assess(plan), len(index))
    assert parts is not None and block.text == f"Warning: {shorten(parts)}\n"


def test_every_json_key_is_documented(tmp_path: Path) -> None:
    text = PAGE.read_text(encoding="utf-8")
    job = yaml.safe_load((REPO / "docs/examples/finetune-4gpu.yaml").read_text())
    nodes = node_views(yaml.safe_load_all(NODES.read_text()))
    out = to_json(explain_pod(pod_templates(job)[0].pod, "ml-research", POLICIES, nodes))
    missing = [k for k in out if f"`{k}`" not in text]
    missing += [k for k in out["nodes"][0] if f"`nodes[].{k}`" not in text]
    assert missing == []
