"""Every kind of bad policy set is refused under `serve` the way `validate` refuses it: the
last good set keeps serving, the refusal is counted once (the metric docs/install.md tells
operators to alert on) and logged as one line, a later good edit is applied."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from tests.common.test_yaml_input import laughs
from tests.webhook.builders import policy_doc, write_yaml
from webhook.server import reload as reload_module
from webhook.server.reload import PolicyStore, PolicyWatcher

HEAD = "apiVersion: topoplace.io/v1alpha1\nkind: PlacementPolicy\nmetadata: {name: p}\nspec:\n"

BROKEN = {
    "alias bomb": HEAD + "  env: {}\n" + laughs(9),
    "nan memory": HEAD + "  resources: {memoryPerGpu: .nan}\n",
    "1e400 memory": HEAD + "  resources: {memoryPerGpu: 1.0e+400}\n",
    "1e30 cpus": HEAD + "  resources: {cpuPerGpu: 1e30}\n",
    "deep nesting": HEAD + "  env: " + "[" * 150 + "]" * 150 + "\n",
}


def watcher(directory: Path, refusals: list[tuple[str, ...]]) -> PolicyWatcher:
    store = PolicyStore()
    watch = PolicyWatcher(directory, store, on_error=refusals.append)
    write_yaml(directory / "p.yaml", policy_doc("p", resources={"cpuPerGpu": 4}))
    watch.load_initial()
    return watch


def refused_lines(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if "policy set refused" in r.getMessage()]


@pytest.mark.parametrize("text", BROKEN.values(), ids=BROKEN.keys())
async def test_a_refused_set_keeps_the_last_good_one(
    tmp_path: Path, text: str, caplog: pytest.LogCaptureFixture
) -> None:
    refusals: list[tuple[str, ...]] = []
    watch = watcher(tmp_path, refusals)
    good = watch.store.current
    (tmp_path / "p.yaml").write_text(text)
    with caplog.at_level(logging.ERROR):
        result = await watch.reload()
        again = await watch.reload()  # the same content: not counted twice
    assert not result.swapped and len(result.errors) == 1
    assert not again.swapped and not again.errors
    assert watch.store.current is good
    assert refusals == [result.errors]
    (line,) = refused_lines(caplog)
    assert "\n" not in line and str(tmp_path / "p.yaml") in line
    write_yaml(tmp_path / "p.yaml", policy_doc("p", resources={"cpuPerGpu": 6}))
    assert (await watch.reload()).swapped


async def test_an_unexpected_loader_failure_is_refused_the_same_way(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    refusals: list[tuple[str, ...]] = []
    watch = watcher(tmp_path, refusals)
    good = watch.store.current

    def broken(directory: Path) -> None:
        raise ArithmeticError("a loader bug")

    monkeypatch.setattr(reload_module, "load_policy_dir", broken)
    write_yaml(tmp_path / "p.yaml", policy_doc("p", resources={"cpuPerGpu": 6}))
    with caplog.at_level(logging.ERROR):
        result = await watch.reload()
        await watch.reload()
    assert result.errors == ("ArithmeticError: a loader bug",)
    assert refusals == [result.errors] and watch.store.current is good
    assert refused_lines(caplog) == [
        "policy set refused; the last good set keeps serving: ArithmeticError: a loader bug"
    ]
