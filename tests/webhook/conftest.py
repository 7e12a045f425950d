"""Fixtures for policy, engine and CLI tests: policies are written to real files and loaded
through the real loader; every mutated pod is checked against the Kubernetes schema and the
kubelet's QoS rules."""

from __future__ import annotations

import copy
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.webhook.builders import SETTINGS, check_mutation, policy_doc, write_yaml
from webhook.engine.outcome import Mutation
from webhook.engine.recipe import mutate
from webhook.policy.loader import PolicySet, load_policy_dir


@pytest.fixture
def policies(tmp_path: Path) -> Callable[..., PolicySet]:
    """policies(doc, doc, ...) -> PolicySet loaded from a real directory."""
    counter = iter(range(1000))

    def load(*docs: dict[str, Any]) -> PolicySet:
        directory = tmp_path / f"policies-{next(counter)}"
        directory.mkdir()
        write_yaml(directory / "policies.yaml", *docs)
        return load_policy_dir(directory)

    return load


@pytest.fixture
def run_mutate(
    policies: Callable[..., PolicySet],
) -> Callable[..., tuple[dict[str, Any], Mutation]]:
    """run_mutate(pod, **spec) -> (mutated pod, Mutation), checked and input-preserving."""

    def run(pod: dict[str, Any], namespace: str = "ml-team", **spec: Any) -> tuple[Any, Mutation]:
        policy_set = policies(policy_doc("p", **spec))
        before = copy.deepcopy(pod)
        result = mutate(pod, namespace, policy_set, SETTINGS)
        assert pod == before, "mutate() changed its input"
        return check_mutation(pod, result), result

    return run
