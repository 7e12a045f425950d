"""`validate` and `serve` accept exactly the same policies (issue 43): over generated policies
with extreme and non-finite numbers, what `validate` accepts mutates every generated pod
without an exception, and what it refuses `serve`'s reload refuses too, keeping the last good
set and counting the refusal."""

from __future__ import annotations

import asyncio
import contextlib
import io
import tempfile
from pathlib import Path
from typing import Any

import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.webhook.builders import SETTINGS, container, make_pod
from webhook.cli.main import main as webhook_main
from webhook.engine.pod_fields import InvalidPod
from webhook.engine.recipe import mutate
from webhook.policy.loader import PolicyLoadError, load_policy_dir
from webhook.server.reload import PolicyStore, PolicyWatcher

GOOD = {
    "apiVersion": "topoplace.io/v1alpha1",
    "kind": "PlacementPolicy",
    "metadata": {"name": "good"},
    "spec": {"resources": {"cpuPerGpu": 4}},
}

numbers = st.one_of(
    st.sampled_from([0, 1, 7, 1024, 1025, 8192, 8193, 10**21, -1, 0.5, 1e30, 1e400]),
    st.sampled_from([float("nan"), float("inf"), "1e30", "1.0e+400", "1e999999999", "1n"]),
    st.sampled_from(["96Gi", "1Mi", "1023Ki", "64Ti", "65Ti", ".5", "500m", True, None]),
    st.floats(allow_nan=True, allow_infinity=True),
    st.integers(min_value=-(2**70), max_value=2**70),
)


@st.composite
def policies(draw: st.DrawFn) -> dict[str, Any]:
    resources: dict[str, Any] = {"guaranteed": draw(st.booleans())}
    for field in ("cpuPerGpu", "memoryPerGpu"):
        if draw(st.booleans()):
            resources[field] = draw(numbers)
    if draw(st.booleans()):
        rdma: dict[str, Any] = {"resource": "rdma/ib", "perGpu": draw(numbers)}
        if draw(st.booleans()):
            rdma = {"resource": "rdma/ib", "wholeNumaNodes": {"gpus": draw(numbers),
                                                              "nics": draw(numbers)}}  # fmt: skip
        resources["rdma"] = rdma
    elif draw(st.booleans()):
        resources.pop("cpuPerGpu", None)
        resources.pop("memoryPerGpu", None)
        share = {"gpus": draw(numbers), "cpu": draw(numbers), "memory": draw(numbers)}
        resources["wholeNumaNodes"] = share
    placement = draw(st.fixed_dictionaries({}, optional={
        "singleNumaNode": st.booleans(), "gpuNicPairs": st.booleans(),
        "topologyManagerPolicies": st.sampled_from(
            [["restricted"], ["single-numa-node"], ["none", "best-effort"]]),
    }))  # fmt: skip
    return {**GOOD, "metadata": {"name": "p"},
            "spec": {"placement": placement, "resources": resources}}  # fmt: skip


def pods() -> st.SearchStrategy[dict[str, Any]]:
    gpus = st.sampled_from([0, 1, 2, 3, 4, 8, 1024])
    return gpus.map(lambda n: make_pod(container(gpus=n) if n else container(), policy="p"))


def write(directory: Path, *docs: dict[str, Any]) -> None:
    for old in directory.glob("*.yaml"):
        old.unlink()
    (directory / "p.yaml").write_text(yaml.safe_dump_all(docs))


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(policies(), st.lists(pods(), min_size=1, max_size=4))
def test_what_validate_accepts_mutates_and_what_it_refuses_serve_refuses(
    policy: dict[str, Any], pod_list: list[dict[str, Any]]
) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        directory = Path(tmp)
        write(directory, GOOD)
        refusals: list[tuple[str, ...]] = []  # serve counts each in reload_errors_total
        store = PolicyStore()
        watcher = PolicyWatcher(directory, store, on_error=refusals.append)
        watcher.load_initial()
        write(directory, GOOD, policy)
        with contextlib.redirect_stderr(io.StringIO()), contextlib.redirect_stdout(io.StringIO()):
            validated = webhook_main(["validate", str(directory)])
        try:
            accepted = load_policy_dir(directory)
        except PolicyLoadError:
            accepted = None
        assert (validated == 0) == (accepted is not None)
        asyncio.run(watcher.reload())
        assert store.current is not None
        if accepted is None:
            # serve refuses it too: the last good set keeps serving, the refusal is counted
            assert store.current.names == ("good",) and len(refusals) == 1
            return
        assert "p" in store.current.names and not refusals
        for pod in pod_list:
            try:
                result = mutate(pod, "ml-team", accepted, SETTINGS)
            except InvalidPod:  # a 400 for a malformed pod is an answer, not a crash
                continue
            assert result.allowed
