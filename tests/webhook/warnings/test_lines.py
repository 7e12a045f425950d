"""Every warning line within the API server's 256 characters, `topoplace: ` counted, and a
placement warning's tail (the pointer to `kubectl topoplace explain`) always whole."""

from __future__ import annotations

import functools
import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from webhook.warnings.kinds import WarningKind
from webhook.warnings.lines import EXPLAIN, LIMIT, PREFIX, Parts, plain_line, shorten

# Node names, policy names, reasons: any characters, spaces and newlines among them.
chars = st.characters(codec="utf-8", exclude_categories=("Cs",))
text = st.text(chars, max_size=300)
parts = st.builds(
    Parts,
    kind=st.sampled_from(WarningKind),
    head=text,
    items=st.lists(text, max_size=8).map(tuple),
    more=st.booleans(),
    bracketed=st.booleans(),
    after=text,
    tail=st.one_of(st.just(EXPLAIN), st.just(""), st.text(chars, max_size=80)),
)


_parts = functools.partial(Parts, kind=WarningKind.KUBELET_REFUSAL)


def one_line(value: str) -> str:
    return re.sub(r"\s+", " ", value)


@given(parts)
def test_any_parts_fit_the_limit_and_keep_their_tail(warning: Parts) -> None:
    line = shorten(warning)
    assert len(line) <= LIMIT
    assert line.startswith(PREFIX) and line.endswith(one_line(warning.tail))
    assert "\n" not in line


@given(parts)
def test_what_fits_whole_is_sent_whole(warning: Parts) -> None:
    whole = PREFIX + warning.text()
    if len(whole) <= LIMIT and one_line(whole) == whole:
        assert shorten(warning) == whole


@given(text)
def test_engine_text_is_prefixed_one_line_and_cut_at_the_limit(value: str) -> None:
    line = plain_line(value)
    flat = " ".join(value.split())
    assert len(line) <= LIMIT and "\n" not in line
    assert line == PREFIX + flat if len(PREFIX + flat) <= LIMIT else line.endswith("…")


NAMES = tuple(f"gpu-node-{i:02d}-in-the-rack-by-the-window" for i in range(3))
REFUSE = (
    " would refuse this pod (TopologyAffinityError), and kube-scheduler may still bind it there"
)


def test_items_go_first_from_the_end_marked_by_an_ellipsis() -> None:
    head = "placement policy p: the kubelets of 3 matching nodes"
    line = shorten(_parts(head, NAMES, bracketed=True, after=REFUSE, tail=EXPLAIN))
    assert line == (
        f"topoplace: {head} (gpu-node-00-in-the-rack-by-the-window, …){REFUSE}{EXPLAIN}"
    )


def test_then_the_text_after_them_then_the_head() -> None:
    head = "placement policy " + "p" * 120 + ": the kubelets of 3 matching nodes"
    line = shorten(_parts(head, NAMES, bracketed=True, after=REFUSE, tail=EXPLAIN))
    assert len(line) == LIMIT and "gpu-node" not in line
    assert line.startswith(f"topoplace: {head} would refuse this pod")
    assert line.endswith(f"…{EXPLAIN}")
    head = "placement policy " + "p" * 240 + ": the kubelets of 3 matching nodes"
    line = shorten(_parts(head, NAMES, bracketed=True, after=REFUSE, tail=EXPLAIN))
    assert line == f"topoplace: {head[: LIMIT - len(PREFIX + EXPLAIN) - 1]}…{EXPLAIN}"


def test_a_single_item_is_cut_at_a_word_while_there_is_room() -> None:
    reason = "no NUMA node has 4 free GPUs (free: 2, 2); " * 6
    head = "placement policy p: the 1 matching node has no room on one NUMA node now"
    line = shorten(_parts(head, (f"n: {reason}",), bracketed=True, after="; the pod waits"))
    assert len(line) <= LIMIT
    assert line.startswith(f"topoplace: {head} (n: no NUMA node has 4 free GPUs (free: 2, 2);")
    assert line.endswith("; no NUMA node has 4…); the pod waits")  # cut at the last space


def test_unbracketed_items_left_out_leave_an_ellipsis() -> None:
    misses = ("12 nodes fail gpu-nic-link (NODE, PHB)", "3 fail topology-manager-policy (none)")
    head = "no node fits placement policy " + "p" * 120 + " for 8 GPUs: "
    line = shorten(_parts(head, misses, tail=EXPLAIN))
    assert line == f"topoplace: {head}12 nodes fail gpu-nic-link (NODE, PHB), …{EXPLAIN}"


def test_a_tail_that_leaves_no_room_is_a_programming_error() -> None:
    with pytest.raises(ValueError, match="leaves no room"):
        shorten(_parts("head", tail="t" * (LIMIT - len(PREFIX))))
