"""The pure diff: which owned keys change, the merge-patch body, and the log phrases."""

from __future__ import annotations

import pytest

from agent.sync.labels.node_diff import (
    Change,
    NodeMeta,
    changes_between,
    cleanup_patch,
    describe,
    sync_patch,
)
from common.vocabulary import TOPOLOGY_ANNOTATION, Label, dataset_label

FOREIGN = {"nvidia.com/gpu.count": "8", "x-topoplace.io/gpus": "8", "topoplace.io.example/a": "1"}


def meta(labels: dict[str, str], annotations: dict[str, str] | None = None) -> NodeMeta:
    return NodeMeta(labels=labels, annotations=annotations or {})


def test_equal_owned_keys_give_no_patch_whatever_foreign_keys_hold() -> None:
    owned = {Label.GPUS: "8", dataset_label("imagenet"): "2024-06"}
    current = meta({**FOREIGN, **owned}, {TOPOLOGY_ANNOTATION: "{}", "other/a": "b"})
    assert sync_patch(current, meta(owned, {TOPOLOGY_ANNOTATION: "{}"})) is None


def test_patch_sets_changed_keys_nulls_vanished_owned_keys_and_omits_foreign_ones() -> None:
    current = meta({**FOREIGN, Label.GPUS: "8", Label.GPU_PRODUCT: "H100"})
    desired = meta({Label.GPUS: "7", Label.RDMA_NICS: "8"}, {TOPOLOGY_ANNOTATION: "{}"})
    assert sync_patch(current, desired) == {
        "metadata": {
            "labels": {Label.GPUS: "7", Label.GPU_PRODUCT: None, Label.RDMA_NICS: "8"},
            "annotations": {TOPOLOGY_ANNOTATION: "{}"},
        }
    }


def test_cleanup_patch_removes_every_owned_key_and_nothing_else() -> None:
    current = meta(
        {**FOREIGN, Label.GPUS: "8", dataset_label("coco"): "2017"},
        {TOPOLOGY_ANNOTATION: "{}", "node.alpha.kubernetes.io/ttl": "0"},
    )
    assert cleanup_patch(current) == {
        "metadata": {
            "labels": {Label.GPUS: None, dataset_label("coco"): None},
            "annotations": {TOPOLOGY_ANNOTATION: None},
        }
    }
    assert cleanup_patch(meta(FOREIGN)) is None


def test_a_desired_foreign_key_is_refused() -> None:
    with pytest.raises(ValueError, match="does not own"):
        changes_between(meta({}), meta({"nvidia.com/gpu.count": "8"}))


@pytest.mark.parametrize(
    ("change", "text"),
    [
        (Change("label", Label.GPU_NIC_PAIRS, "8", "7"), "gpu-nic-pairs 8 → 7"),
        (Change("label", Label.GPUS, None, "8"), "gpus = 8 (added)"),
        (Change("label", Label.GPU_PRODUCT, "H100", None), "gpu-product removed (was H100)"),
        (
            Change("label", dataset_label("imagenet"), None, "2024-06"),
            "dataset imagenet 2024-06 became complete",
        ),
        (
            Change("label", dataset_label("imagenet"), "2024-06", None),
            "dataset imagenet removed (was 2024-06)",
        ),
        (
            Change("label", dataset_label("imagenet"), "2024-01", "2024-06"),
            "dataset imagenet 2024-01 → 2024-06",
        ),
        (Change("annotation", TOPOLOGY_ANNOTATION, "{}", "{ }"), "topology annotation changed"),
    ],
)
def test_changes_read_as_a_person_would_say_them(change: Change, text: str) -> None:
    assert describe(change) == text
