"""Kubeconfigs are read within bounds and checked for shape before the client library reads
them: an empty or malformed file is one ConfigError line, never a TypeError from inside it."""

from __future__ import annotations

from pathlib import Path

import pytest

from common.kube_config import ConfigError, check_kubeconfig, load_configuration
from tests.common.test_yaml_input import laughs

GOOD = """\
apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "https://127.0.0.1:6443"}}]
users: [{name: u, user: {token: t}}]
contexts: [{name: x, context: {cluster: c, user: u}}]
current-context: x
"""


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("", "empty; expected a kubeconfig (kind: Config with clusters, contexts and users)"),
        ("# only a comment\n", "empty; expected a kubeconfig"),
        ("- a\n- b\n", "not one mapping; expected a kubeconfig"),
        ("a: 1\n---\nb: 2\n", "not one mapping"),
        ("clusters: 5\ncurrent-context: x\n", "clusters must be a list of named entries"),
        ("contexts: [1]\n", "contexts must be a list of named entries"),
        ("users: [{user: {}}]\n", "users must be a list of named entries"),
        ("current-context: [x]\n", "current-context must be a string"),
        ("clusters: [\n", "invalid YAML"),
        (laughs(9), "YAML aliases expand to more than 100,000 nodes"),
        ("a: " + "[" * 101 + "]" * 101, "nested deeper than 100 levels"),
    ],
)
async def test_a_bad_kubeconfig_is_one_config_error(tmp_path: Path, text: str, says: str) -> None:
    path = tmp_path / "config"
    path.write_text(text)
    with pytest.raises(ConfigError) as caught:
        check_kubeconfig(path)
    assert says in str(caught.value) and str(path) in str(caught.value)
    with pytest.raises(ConfigError) as loading:
        await load_configuration(path)
    assert str(loading.value) == str(caught.value)
    assert "\n" not in str(loading.value)


async def test_a_good_kubeconfig_still_loads(tmp_path: Path) -> None:
    path = tmp_path / "config"
    path.write_text(GOOD)
    check_kubeconfig(path)
    assert (await load_configuration(path)).host == "https://127.0.0.1:6443"


async def test_every_file_of_kubeconfig_is_checked(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    good, empty = tmp_path / "good", tmp_path / "empty"
    good.write_text(GOOD)
    empty.write_text("")
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    monkeypatch.setenv("KUBECONFIG", f"{good}:{empty}")
    with pytest.raises(ConfigError, match=f"kubeconfig {empty}: empty"):
        await load_configuration(None)
