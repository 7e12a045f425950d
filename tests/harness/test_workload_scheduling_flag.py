"""TOPOPLACE_E2E_WORKLOAD_SCHEDULING=1 turns Kubernetes' gang and topology-aware scheduling on
for the three components that need it, and nothing on by default (the default cluster stays as
Kubernetes v1.37 ships)."""

from __future__ import annotations

import pytest

from e2e.controlplane.start import WORKLOAD_SCHEDULING, workload_scheduling_args

GATES = (
    "--feature-gates=GenericWorkload=true,TopologyAwareWorkloadScheduling=true,WorkloadWithJob=true"
)


def test_off_by_default(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(WORKLOAD_SCHEDULING, raising=False)
    for component in ("kube-apiserver", "kube-controller-manager", "kube-scheduler"):
        assert workload_scheduling_args(component) == []


def test_on_the_api_and_the_gates_where_each_is_read(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(WORKLOAD_SCHEDULING, "1")
    assert workload_scheduling_args("kube-apiserver") == [
        GATES,
        "--runtime-config=scheduling.k8s.io/v1beta1=true",  # a beta API, off by default
    ]
    assert workload_scheduling_args("kube-controller-manager") == [GATES]  # the Job controller
    assert workload_scheduling_args("kube-scheduler") == [GATES]  # gang and topology plugins
