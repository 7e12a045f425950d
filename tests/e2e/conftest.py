"""Fixtures for the scenarios on the real control plane that `make cluster` started.

Every scenario is marked `e2e` (never part of `make test`); `make e2e` brings the cluster up,
runs them, and takes it down. A failed scenario's report ends with the tails of the logs that
matter: our containers, the kubelets and runtimes, the scheduler and the API server.
"""

from __future__ import annotations

import itertools
import json
import secrets
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from e2e import procs
from e2e.cluster import Cluster, load
from e2e.kube import Kubectl
from e2e.topoplace.containers import log_tails

REPO = Path(__file__).resolve().parents[2]
_LOGS = ("service-proxy", "kube-scheduler", "kube-apiserver")
_NODE_LOGS = ("kubelet-", "runtime-")


DEFAULT_TRUTH_SEED, DEFAULT_TRUTH_CASES = 20261203, 40


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("topoplace e2e")
    group.addoption(
        "--cases",
        type=int,
        default=DEFAULT_TRUTH_CASES,
        help=f"random pods the kubelet-truth scenario judges (default {DEFAULT_TRUTH_CASES})",
    )
    group.addoption(
        "--truth-seed",
        type=int,
        default=DEFAULT_TRUTH_SEED,
        help=f"seed of the kubelet-truth scenario's random pods (default {DEFAULT_TRUTH_SEED})",
    )
    group.addoption(
        "--truth-case",
        type=int,
        action="append",
        default=[],
        help="judge only this case of the seed (repeatable): replays a disagreement alone",
    )


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    here = Path(__file__).parent
    for item in items:
        if here in Path(item.fspath).parents:
            item.add_marker(pytest.mark.e2e)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    outcome = yield
    report = outcome.get_result()
    if report.failed and "e2e" in item.keywords:
        try:
            loaded = load()
        except FileNotFoundError:
            return
        state = loaded.state
        per_node = sorted(
            p.stem for p in (state / "logs").glob("*.log") if p.stem.startswith(_NODE_LOGS)
        )
        names = [*_LOGS, *per_node]
        tails = [procs.log_tail(state, n, 12 if n in per_node else 25) for n in names]
        tails += log_tails(loaded.nodes)  # Topoplace's own containers, as `kubectl logs`
        report.sections.append(("cluster logs", "\n\n".join(tails)))


@pytest.fixture(scope="session")
def cluster() -> Cluster:
    try:
        return load()
    except FileNotFoundError as exc:
        pytest.fail(f"{exc} (make e2e does both)")


@pytest.fixture(scope="session")
def kubectl(cluster: Cluster) -> Kubectl:
    return cluster.kubectl


_numbers = itertools.count(1)


@pytest.fixture
def namespace(kubectl: Kubectl) -> Iterator[str]:
    """A fresh namespace matching the example policies' `ml-*` allowlist, deleted afterwards."""
    name = f"ml-e2e-{next(_numbers)}-{secrets.token_hex(3)}"  # unique across runs
    kubectl("create", "namespace", name)
    procs.wait_for(
        lambda: kubectl.run("get", "sa", "default", "-n", name, check=False).returncode == 0,
        f"serviceaccount default in {name}",
    )
    yield name
    # The kubelets free a pod's exclusive CPUs and devices when they stop it: wait for that
    # (the Pods gone), so the next scenario finds the nodes as empty as the scheduler does.
    kubectl.run("delete", "deployments,jobs,replicasets", "--all", "-n", name, check=False)
    kubectl.run(
        "delete",
        "pods",
        "--all",
        "-n",
        name,
        "--grace-period=1",
        "--timeout=90s",
        check=False,
        timeout=120,
    )
    kubectl.run("delete", "namespace", name, "--wait=false", check=False)


@pytest.fixture
def create(kubectl: Kubectl) -> Callable[..., subprocess.CompletedProcess[str]]:
    """`create(obj, namespace)`: kubectl create of one object; returns the completed process."""

    def run(
        obj: dict[str, Any], namespace: str, *args: str, check: bool = True
    ) -> subprocess.CompletedProcess[str]:
        return kubectl.run(
            "create",
            "-n",
            namespace,
            "-f",
            "-",
            "-o",
            "json",
            *args,
            input=json.dumps(obj),
            check=check,
        )

    return run
