"""The bounded YAML reader every input file goes through: size, nesting and aliases.

The alias and nesting cases port go-yaml v3's `limit_test.go` table (the reader Kubernetes
itself uses), scaled from 1000 kB to 100 kB and to this reader's bounds: nesting at most
100 levels (go-yaml: 10,000), aliases expanding to at most 100,000 nodes in all (go-yaml: a
ratio that allows about 400,000).
"""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest

from common.yaml_input import (
    CONFIG,
    LISTING,
    MAX_ALIAS_NODES,
    MAX_ALIASES,
    MAX_DEPTH,
    POLICY,
    YamlBounds,
    YamlInputError,
    check_bounds,
    check_depth,
    load_documents,
    read_text,
)

KB = 1024


def laughs(levels: int, width: int = 9) -> str:
    """The "billion laughs": each level a list of `width` aliases of the one before."""
    names = "abcdefghijklmnopqrstuvwxyz"
    lines = ["a: &a [lol]"]
    for i in range(1, levels + 1):
        lines.append(f"{names[i]}: &{names[i]} [" + ",".join([f"*{names[i - 1]}"] * width) + "]")
    return "\n".join(lines) + "\n"


def one_line_error(text: str, bounds: YamlBounds = LISTING) -> str:
    with pytest.raises(YamlInputError) as caught:
        load_documents(text, source="in.yaml", bounds=bounds)
    message = str(caught.value)
    assert "\n" not in message and message.startswith("in.yaml")
    return message


# (name, text, the error's words or None when it loads): go-yaml's limit_test.go, scaled.
LIMITS = [
    (
        "100kb of maps with 100 aliases",
        "{a: &a [{a}" + ",{a}" * (100 * KB // 4 - 100) + "], b: &b [*a" + ",*a" * 99 + "]}",
        "aliases expand to more than 100,000 nodes",
    ),
    # libyaml's scanner refuses flow nesting past 1,000 itself, before this reader's count.
    ("100kb of deeply nested slices", "[" * (100 * KB), "exceeded maximum nesting depth"),
    ("100kb of deeply nested maps", "x: " + "{" * (100 * KB), "exceeded maximum nesting depth"),
    ("101 nested slices", "[" * 101 + "]" * 101, "nested deeper than 100 levels"),
    ("101 nested maps", "x: " + "{a: " * 100 + "1" + "}" * 100, "nested deeper than 100 levels"),
    ("100kb of deeply nested indents", "- " * (100 * KB), "nested deeper than 100 levels"),
    ("1kb of 101-indent lines", ("- " * 101 + "\n") * 5, "nested deeper than 100 levels"),
    ("1kb of 100-indent lines", ("- " * 100 + "\n") * 5, None),
    ("1kb of maps", "a: &a [{a}" + ",{a}" * (KB // 4 - 1) + "]", None),
    ("10kb of maps", "a: &a [{a}" + ",{a}" * (10 * KB // 4 - 1) + "]", None),
    ("100kb of maps", "a: &a [{a}" + ",{a}" * (100 * KB // 4 - 1) + "]", None),
    (
        "100kb slice nested at max-depth",
        "[" * MAX_DEPTH + "1" + ",1" * (100 * KB // 2 - 2 * MAX_DEPTH - 1) + "]" * MAX_DEPTH,
        None,
    ),
    (
        "100kb slice nested in maps at max-depth",
        "{a,b:\n"
        + " {a,b:" * (MAX_DEPTH - 2)
        + " [1"
        + ",1" * (100 * KB // 2 - 6 * MAX_DEPTH - 1)
        + "]"
        + "}" * (MAX_DEPTH - 1),
        None,
    ),
    (
        "100kb of 100-nested lines",
        ("- " + "[" * (MAX_DEPTH - 1) + "]" * (MAX_DEPTH - 1) + "\n") * (100 * KB // 200),
        None,
    ),
]


@pytest.mark.parametrize(
    ("text", "error"), [case[1:] for case in LIMITS], ids=[c[0] for c in LIMITS]
)
def test_go_yaml_limit_table(text: str, error: str | None) -> None:
    if error is None:
        check_bounds(text, source="in.yaml", bounds=LISTING)
    else:
        assert error in one_line_error(text)


@pytest.mark.parametrize("levels", [4, 5, 9, 20])
def test_an_alias_bomb_is_refused_at_the_line_that_overflows(levels: int) -> None:
    # Level 4 (line 5) expands to about 24,000 nodes; level 5 (line 6) adds 9 × 21,000: refused
    # there, whatever the later levels would add; nothing is expanded to find out.
    text = laughs(levels)
    if levels == 4:
        assert load_documents(text, source="in.yaml", bounds=POLICY)
        return
    message = one_line_error(text, POLICY)
    assert message.startswith("in.yaml: line 6: YAML aliases expand to more than 100,000 nodes")


def test_aliases_are_counted() -> None:
    scalars = "a: &a x\nb: [" + ", ".join(["*a"] * MAX_ALIASES) + "]\n"
    assert len(load_documents(scalars, source="in.yaml")[0]["b"]) == MAX_ALIASES
    one_more = scalars.replace("[*a", "[*a, *a")
    assert f"more than {MAX_ALIASES} YAML aliases" in one_line_error(one_more)


def test_the_expanded_size_counts_aliases_inside_anchors() -> None:
    # a: 1,001 nodes; b: n aliases of a (n × 1,001 expanded), then b once more through *b.
    def text(n: int) -> str:
        a = "a: &a [" + ",".join(["x"] * 1000) + "]\n"
        return a + "b: &b [" + ",".join(["*a"] * n) + "]\nd: [*b]\n"

    load_documents(text(49), source="in.yaml")  # 49,049 + 49,099 = 98,148 nodes
    message = one_line_error(text(50))  # 50,050 + 50,101 = 100,151 nodes
    assert message.startswith("in.yaml: line 3: YAML aliases expand to more than 100,000")
    assert MAX_ALIAS_NODES == 100_000


def test_nesting_exactly_at_the_bound_loads() -> None:
    assert load_documents("[" * MAX_DEPTH + "]" * MAX_DEPTH, source="in.yaml") == [
        json.loads("[" * MAX_DEPTH + "]" * MAX_DEPTH)
    ]
    assert "nested deeper than 100 levels" in one_line_error("[" * 101 + "]" * 101)


def test_syntax_errors_are_one_line_with_the_place() -> None:
    assert one_line_error("a: [1, 2\nb: 3\n").startswith("in.yaml: line 2 column 2: invalid YAML")
    assert "undefined alias" in one_line_error("a: *nowhere\n")


def test_a_file_past_its_size_is_refused_without_reading_it_all(tmp_path: Path) -> None:
    small = YamlBounds(max_bytes=1000, what="a test file")
    big = tmp_path / "big.yaml"
    big.write_text("a: b\n" * 1000)
    with pytest.raises(YamlInputError) as caught:
        read_text(big, bounds=small)
    assert str(caught.value) == f"{big}: larger than 1000 bytes, the most a test file may hold"
    fits = tmp_path / "fits.yaml"
    fits.write_text("a: b\n" * 200)
    assert read_text(fits, bounds=small) == "a: b\n" * 200
    with pytest.raises(YamlInputError, match=r"^<stdin>: larger than 1000 bytes"):
        read_text("-", bounds=small, stdin=io.StringIO("a: b\n" * 1000))
    with pytest.raises(YamlInputError, match=r"^s: larger than 1000 bytes"):
        check_bounds("a: b\n" * 300, source="s", bounds=small)


def test_the_bounds_of_each_kind_of_file() -> None:
    assert (POLICY.max_bytes, CONFIG.max_bytes, LISTING.max_bytes) == (2**20, 4 * 2**20, 2**27)


def test_text_that_is_not_utf8_is_one_line(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_bytes(b"a: \xff\xfe\n")
    with pytest.raises(YamlInputError) as caught:
        read_text(bad, bounds=CONFIG)
    assert str(caught.value) == f"{bad}: not UTF-8 text (byte 3)"


def test_json_depth_is_measured_without_recursion() -> None:
    check_depth(json.loads("[" * MAX_DEPTH + "]" * MAX_DEPTH), source="c.json", bounds=CONFIG)
    deep: list = []
    for _ in range(100_000):  # far past Python's recursion limit
        deep = [deep]
    with pytest.raises(YamlInputError, match=r"^c.json: nested deeper than 100 levels"):
        check_depth({"a": deep}, source="c.json", bounds=CONFIG)
