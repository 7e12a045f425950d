"""docs/policies.md stays true: every policy field is documented, its example policies load,
its commands run, and the outputs it shows are what the commands really print."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from tests.docs.markdown import REPO, commands, fenced_blocks, missing_lines, run_cli
from webhook.policy.loader import load_policy_dir, parse_policy_text
from webhook.policy.model import PlacementPolicy
from webhook.vocabulary import APPLIED_ANNOTATION, POLICY_LABEL

PAGE = REPO / "docs" / "policies.md"


def _field_names(schema: Any) -> set[str]:
    """Every property name anywhere in the schema, $defs included."""
    names: set[str] = set()
    if isinstance(schema, dict):
        properties = schema.get("properties")
        if isinstance(properties, dict):
            names |= set(properties)
        for value in schema.values():
            names |= _field_names(value)
    elif isinstance(schema, list):
        for value in schema:
            names |= _field_names(value)
    return names


def _code_spans(text: str) -> str:
    """Text of inline code spans and fenced blocks: where a field name counts as documented."""
    fenced = "\n".join(b.text for b in fenced_blocks(PAGE))
    return "\n".join([*re.findall(r"`([^`\n]+)`", text), fenced])


def test_every_schema_field_is_documented() -> None:
    fields = _field_names(PlacementPolicy.model_json_schema(by_alias=True))
    assert {"gpuNicLink", "perGpu", "mountPath"} <= fields  # the walk reached into $defs
    code = _code_spans(PAGE.read_text(encoding="utf-8"))
    undocumented = sorted(f for f in fields if not re.search(rf"\b{re.escape(f)}\b", code))
    assert undocumented == []


def test_pod_side_keys_are_named() -> None:
    text = PAGE.read_text(encoding="utf-8")
    assert f"`{POLICY_LABEL}" in text
    assert f"`{APPLIED_ANNOTATION}" in text


def _policy_blocks() -> list[str]:
    return [
        b.text
        for b in fenced_blocks(PAGE)
        if b.lang == "yaml" and re.search(r"^kind: PlacementPolicy$", b.text, flags=re.M)
    ]


def test_example_policies_pass_the_loader(tmp_path: Path) -> None:
    blocks = _policy_blocks()
    assert len(blocks) >= 2
    for number, text in enumerate(blocks, start=1):
        found, errors = parse_policy_text(text, source=f"policies.md block {number}")
        assert errors == []
        assert len(found) == 1
    # Together, as a directory the webhook would load: names must not clash either.
    for number, text in enumerate(blocks, start=1):
        (tmp_path / f"block{number}.yaml").write_text(text, encoding="utf-8")
    assert len(load_policy_dir(tmp_path)) == len(blocks)


def test_the_reference_example_uses_every_section() -> None:
    # The "at a glance" policy sets every spec field, so editors can copy from one place.
    (full,) = [t for t in _policy_blocks() if "placement:" in t]
    found, _ = parse_policy_text(full, source="policies.md")
    spec = found[0][0].spec
    assert spec.model_fields_set == set(type(spec).model_fields)


_COMMANDS = commands(PAGE)


def test_the_page_has_the_commands_it_promises() -> None:
    verbs = {c.argv[1] for c in _COMMANDS}
    assert verbs == {"validate", "mutate", "schema"}


@pytest.mark.parametrize("command", _COMMANDS, ids=lambda c: f"line{c.line}-{c.argv[1]}")
def test_command_runs_and_shows_its_real_output(command: Any) -> None:
    result = run_cli(command.argv)
    assert result.returncode == 0, result.stderr
    if command.argv[1] == "schema":
        assert json.loads(result.stdout)["title"] == "PlacementPolicy"
    if command.shown is not None:
        assert missing_lines(command.shown.text, result.stdout) == []


def test_validation_messages_shown_are_real(tmp_path: Path) -> None:
    blocks = fenced_blocks(PAGE)
    (policy,) = [b for b in blocks if b.tag and b.tag[0] == "broken-policy"]
    (shown,) = [b for b in blocks if b.tag and b.tag[0] == "validate-output"]
    target = tmp_path / policy.tag[1]
    target.parent.mkdir(parents=True)
    target.write_text(policy.text, encoding="utf-8")
    result = run_cli(["topoplace-webhook", "validate", shown.tag[1]], cwd=tmp_path)
    assert result.returncode == 1
    assert missing_lines(shown.text, result.stderr) == []
