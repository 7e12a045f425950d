"""The RFC 6902 diff: applies with jsonpatch, escapes keys, stays small for insertions."""

from __future__ import annotations

from typing import Any

import jsonpatch
import pytest

from webhook.engine.patch import json_diff

PAIRS: list[tuple[str, Any, Any]] = [
    ("add nested key", {"a": {}}, {"a": {"b/c": 1, "d~e": [1]}}),
    ("remove key", {"a": 1, "b": 2}, {"a": 1}),
    ("scalar insertion", {"c": ["x", "y", "z"]}, {"c": ["x", "--f", "y", "z"]}),
    (
        "prepend items",
        {"l": [{"name": "a", "v": 1}]},
        {"l": [{"name": "p"}, {"name": "a", "v": 2}]},
    ),
    ("append items", {"l": [{"name": "a"}]}, {"l": [{"name": "a", "x": 1}, {"name": "b"}]}),
    ("shrink list", {"l": [1, 2, 3]}, {"l": [1]}),
    ("bool vs int", {"a": 1}, {"a": True}),
    ("type change", {"a": [1]}, {"a": {"b": 1}}),
]


@pytest.mark.parametrize(("old", "new"), [p[1:] for p in PAIRS], ids=[p[0] for p in PAIRS])
def test_patch_turns_old_into_new(old, new):
    patch = json_diff(old, new)
    result = jsonpatch.apply_patch(old, patch)
    assert result == new and [type(v) for v in result.values()] == [type(v) for v in new.values()]


def test_keys_are_escaped():
    patch = json_diff({}, {"a/b~c": 1})
    assert patch == [{"op": "add", "path": "/a~1b~0c", "value": 1}]


def test_flag_insertion_is_one_add():
    patch = json_diff({"c": ["torchrun", "t.py"]}, {"c": ["torchrun", "--x", "t.py"]})
    assert patch == [{"op": "add", "path": "/c/1", "value": "--x"}]


def test_equal_documents_give_empty_patch():
    doc = {"a": [{"b": 1}], "c": "d"}
    assert json_diff(doc, {"a": [{"b": 1}], "c": "d"}) == []
