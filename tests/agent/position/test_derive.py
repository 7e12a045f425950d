"""From facts and the Node's labels to the agent's position labels: precedence, values, notes."""

from __future__ import annotations

import logging

import pytest

from agent.position.derive import Positioner, PositionFacts, position_labels, tier_values
from agent.position.model import Tiers
from common.k8s_names import label_value_problem
from common.vocabulary import ForeignLabel, Label

T1, T2, T3, DOMAIN = (
    Label.NETWORK_TIER_1,
    Label.NETWORK_TIER_2,
    Label.NETWORK_TIER_3,
    Label.NVLINK_DOMAIN,
)
GCP = Tiers("gcp metadata", ("s2", "b7", "c1"))


def test_metadata_alone_gives_nested_values_closest_first() -> None:
    labels, notes = position_labels(PositionFacts(metadata=GCP), {})
    assert labels == {T1: "c1.b7.s2", T2: "c1.b7", T3: "c1"}
    assert notes == []


def test_two_sub_blocks_with_one_name_in_two_blocks_stay_apart() -> None:
    a = tier_values(("s1", "b1", None))
    b = tier_values(("s1", "b2", None))
    assert a[0] != b[0] and a[0] == "b1.s1"


def test_aws_layers_read_closest_first_and_never_written() -> None:
    aws = ForeignLabel.AWS_NETWORK_LAYERS
    node = {aws[0]: "nn-top", aws[1]: "nn-mid", aws[2]: "nn-leaf"}
    labels, _ = position_labels(PositionFacts(), node)
    assert labels[T1] == "nn-top.nn-mid.nn-leaf" and labels[T3] == "nn-top"
    assert not set(labels) & set(node)


def test_gke_and_topograph_labels() -> None:
    gke = {ForeignLabel.GKE_BLOCK: "b", ForeignLabel.GKE_SUBBLOCK: "s"}
    assert position_labels(PositionFacts(), gke)[0] == {T1: "b.s", T2: "b"}
    tiers = ForeignLabel.TOPOGRAPH_TIERS
    topo = {tiers[0]: "leaf-3", tiers[1]: "spine-1", ForeignLabel.TOPOGRAPH_DOMAIN: "u.1"}
    assert position_labels(PositionFacts(), topo)[0] == {
        T1: "spine-1.leaf-3",
        T2: "spine-1",
        DOMAIN: "u.1",
    }


def test_an_existing_label_wins_over_metadata_and_a_note_says_so() -> None:
    gke = {ForeignLabel.GKE_BLOCK: "b7", ForeignLabel.GKE_SUBBLOCK: "other"}
    labels, notes = position_labels(PositionFacts(metadata=GCP), gke)
    assert labels[T1] == "b7.other"
    (note,) = notes
    assert "GKE labels" in note and "tier 1" in note and "tier 2" not in note


def test_gfd_clique_wins_over_nvml() -> None:
    node = {ForeignLabel.GFD_CLIQUE: "u.1"}
    labels, notes = position_labels(PositionFacts(nvlink_domain="u.2"), node)
    assert labels == {DOMAIN: "u.1"}
    assert "GFD label" in notes[0]
    assert position_labels(PositionFacts(nvlink_domain="u.2"), {})[0] == {DOMAIN: "u.2"}


def test_nothing_known_publishes_nothing() -> None:
    assert position_labels(PositionFacts(metadata=Tiers("x", (None, None, None))), {}) == ({}, [])


def test_values_that_do_not_fit_a_label_are_hashed_stably() -> None:
    long = Tiers("oci metadata", ("ocid1.localblock." + "a" * 60, "nb", "island/with/slash"))
    labels, _ = position_labels(PositionFacts(metadata=long), {})
    for key in (T1, T2, T3):
        assert label_value_problem(labels[key]) is None
        assert labels[key].startswith("sha256-")
    again, _ = position_labels(PositionFacts(metadata=long), {})
    assert again == labels  # every node of the group computes the same value


def test_positioner_logs_each_disagreement_once(caplog: pytest.LogCaptureFixture) -> None:
    positioner = Positioner()
    node = {ForeignLabel.GKE_BLOCK: "other", ForeignLabel.GKE_SUBBLOCK: "s2"}
    with caplog.at_level(logging.WARNING, logger="agent.position.derive"):
        for _ in range(3):
            labels = positioner.apply({Label.GPUS: "8", T3: "stale"}, PositionFacts(GCP), node)
    assert labels == {Label.GPUS: "8", T1: "other.s2", T2: "other"}
    assert len(caplog.records) == 1
