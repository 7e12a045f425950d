"""The answer cache: alike pods share one engine run, and no answer outlives what it was
made from. For each thing an answer depends on — the policy set, the nodes, the DRA claim
templates — a real change (a file edit and reload, a watch event, a template created) is
followed by one admission over HTTPS that must be the engine's fresh answer."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import aiohttp
import yaml

from tests.webhook.claims.fake_apiserver import FakeApiServer as ClaimsApiServer
from tests.webhook.claims.fake_apiserver import running
from tests.webhook.nodefit.conftest import EXAMPLE_NODES
from tests.webhook.server.conftest import (
    TlsFiles,
    admission_review,
    ddp_policy,
    decode_patch,
    gpu_pod,
    post_review,
    server_config,
    wait_until,
)
from tests.webhook.server.fake_nodes import NodeApiServer
from tests.webhook.stores.test_claim_template_store import template
from webhook import jsonio
from webhook.engine.outcome import EngineSettings
from webhook.server.answer_cache import MAX_KEY_BYTES, CachedAdmitter, request_key
from webhook.server.pod_admission import Admission, PolicyAdmitter
from webhook.server.review import ReviewRequest, parse_review
from webhook.server.runner import WebhookServer
from webhook.server.workload_admission import WorkloadAdmitter
from webhook.stores.claim_template_store import ClaimTemplateStore

FLEET = {n["metadata"]["name"]: n for n in yaml.safe_load(EXAMPLE_NODES.read_text())["items"]}
FAR = ("pcie-l40s-a", "workstation-a")  # no GPU-NIC link at PXB or better: ddp fits neither


def request(pod: dict[str, Any], **review: Any) -> ReviewRequest:
    return parse_review(json.dumps(admission_review(pod, **review)).encode())


def job_pod(index: int) -> dict[str, Any]:
    """Pod `index` of an Indexed Job: its own name, hostname, index label and annotation."""
    pod = gpu_pod()
    pod["metadata"]["name"] = f"train-7f9c-{index}-abcde"
    pod["metadata"]["labels"]["batch.kubernetes.io/job-completion-index"] = str(index)
    pod["metadata"]["annotations"] = {"batch.kubernetes.io/job-completion-index": str(index)}
    pod["spec"]["hostname"] = f"train-7f9c-{index}"
    pod["spec"]["subdomain"] = "train-7f9c"
    return pod


def without_uid(answer: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in answer["response"].items() if k != "uid"}


def test_the_pods_of_one_job_share_a_key_and_what_changes_the_answer_does_not() -> None:
    key = request_key(request(job_pod(0)))
    assert key is not None
    assert request_key(request(job_pod(7), uid="another")) == key
    changed = job_pod(0)
    changed["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] = "4"
    applied = job_pod(0)
    applied["metadata"]["annotations"]["topoplace.io/applied"] = "ddp@0123"
    bare = job_pod(0)
    del bare["metadata"]["annotations"]  # the patch then adds the whole map
    other_policy = job_pod(0)
    other_policy["metadata"]["labels"]["topoplace.io/policy"] = "prod-only"
    others = [
        request_key(request(changed)),
        request_key(request(applied)),
        request_key(request(bare)),
        request_key(request(other_policy)),
        request_key(request(job_pod(0), namespace="ml-other")),
    ]
    assert key not in others and len(set(others)) == len(others)
    assert request_key(request(gpu_pod(policy=None))) is None  # not opted in: left alone
    assert request_key(request(job_pod(0), operation="UPDATE", old=job_pod(0))) is None


class CountingAdmitter:
    def __init__(self, inner: PolicyAdmitter) -> None:
        self.inner = inner
        self.calls = 0

    def admit(self, req: ReviewRequest) -> Admission:
        self.calls += 1
        return self.inner.admit(req)


def test_a_cached_answer_is_the_engines_answer_for_that_pod(policy_dir: Path) -> None:
    from webhook.policy.loader import load_policy_dir

    policies = load_policy_dir(policy_dir)
    engine = PolicyAdmitter(lambda: policies, EngineSettings())
    counting = CountingAdmitter(engine)
    cached = CachedAdmitter(counting, lambda: policies)
    for index in range(5):
        req = request(job_pod(index), uid=f"uid-{index}")
        answer = cached.admit(req)
        fresh = engine.admit(req)
        assert answer.review == fresh.review  # uid echoed, patch and warnings the same
        # Computed or reused, the answer comes written once: the bytes the engine's would be.
        assert answer.payload == jsonio.dumps(fresh.review)
        assert (answer.outcome, answer.policy, answer.patch_ops) == (
            fresh.outcome,
            fresh.policy,
            fresh.patch_ops,
        )
        assert answer.pod_name == f"train-7f9c-{index}-abcde"
    assert counting.calls == 1 and cached.hits == 4


def test_a_pod_past_the_key_bound_is_never_kept(policy_dir: Path) -> None:
    from webhook.policy.loader import load_policy_dir

    policies = load_policy_dir(policy_dir)
    counting = CountingAdmitter(PolicyAdmitter(lambda: policies, EngineSettings()))
    cached = CachedAdmitter(counting, lambda: policies)
    pod = job_pod(0)
    pod["spec"]["containers"][0]["env"] = [
        {"name": f"A_VARIABLE_NAMED_{i:06d}", "value": "x"} for i in range(3000)
    ]
    assert len(json.dumps(pod["spec"])) > MAX_KEY_BYTES
    assert request_key(request(pod)) is None
    for _ in range(2):
        assert cached.admit(request(pod)).outcome == "mutated"
    assert counting.calls == 2 and cached.hits == 0


def test_a_failed_open_answer_is_never_kept(policy_dir: Path) -> None:
    from webhook.policy.loader import load_policy_dir

    policies = load_policy_dir(policy_dir)
    broken = True

    def mutate(*args: Any) -> Any:
        if broken:
            raise RuntimeError("engine bug")
        from webhook.engine.recipe import mutate as real

        return real(*args)

    cached = CachedAdmitter(PolicyAdmitter(lambda: policies, EngineSettings(), mutate=mutate), dict)
    assert cached.admit(request(job_pod(0))).outcome == "failed_open"
    broken = False
    assert cached.admit(request(job_pod(0))).outcome == "mutated"


async def answers(
    client: aiohttp.ClientSession, server: WebhookServer, pod: dict[str, Any], count: int = 2
) -> list[dict[str, Any]]:
    out = []
    for _ in range(count):
        status, answer = await post_review(client, server.url, admission_review(pod))
        assert status == 200
        out.append(answer)
    return out


def cached_admitter(server: WebhookServer) -> CachedAdmitter:
    assert server.state is not None
    admitter = server.state.admitter
    pods = admitter.pods if isinstance(admitter, WorkloadAdmitter) else admitter
    assert isinstance(pods, CachedAdmitter)
    return pods


async def test_a_policy_reload_is_seen_by_the_next_admission(
    policy_dir: Path, tls_files: TlsFiles, client: aiohttp.ClientSession
) -> None:
    async with WebhookServer(server_config(policy_dir, tls_files)) as server:
        first, again = await answers(client, server, gpu_pod())
        assert without_uid(first) == without_uid(again) and cached_admitter(server).hits == 1
        assert server.state is not None
        before = server.state.store.current
        (policy_dir / "ddp.yaml").write_text(ddp_policy(cpu=3, mark="edited"))

        async def swapped() -> bool:
            return server.state is not None and server.state.store.current is not before

        await wait_until(swapped, "the edited policy set to be loaded")
        (after,) = await answers(client, server, gpu_pod(), count=1)
        ops = {op["path"]: op.get("value") for op in decode_patch(after["response"])}
        env = ops["/spec/containers/0/env"]
        assert {"name": "MARK", "value": "edited"} in env


async def test_a_node_event_is_seen_by_the_next_admission(
    tmp_path: Path, policy_dir: Path, tls_files: TlsFiles, client: aiohttp.ClientSession
) -> None:
    async with NodeApiServer(tmp_path) as api:
        for name in FAR:
            api.node_store.put(FLEET[name])
        config = server_config(
            policy_dir, tls_files, node_cache=True, kubeconfig=api.write_kubeconfig()
        )
        async with WebhookServer(config) as server:
            nodes = server.state.nodes if server.state is not None else None
            assert nodes is not None

            async def watching() -> bool:
                return nodes.ready and "watch" in api.node_requests

            await wait_until(watching, "the node cache to list and watch")
            first, again = await answers(client, server, gpu_pod())
            assert any("no node fits" in w for w in first["response"]["warnings"])
            assert without_uid(first) == without_uid(again) and cached_admitter(server).hits == 1
            events = nodes.events
            api.node_store.put(FLEET["dgx-a100-a"])  # PXB, 8 GPU-NIC pairs: ddp fits

            async def applied() -> bool:
                return nodes.events > events  # the latest `events` set below

            await wait_until(applied, "the ADDED event")
            (after,) = await answers(client, server, gpu_pod(), count=1)
            assert not any("no node fits" in w for w in after["response"].get("warnings", []))
            # A MODIFIED event that changes nothing a verdict reads keeps the entry.
            events, hits = nodes.events, cached_admitter(server).hits
            api.node_store.put(FLEET["dgx-a100-a"])
            await wait_until(applied, "the MODIFIED event")
            (same,) = await answers(client, server, gpu_pod(), count=1)
            assert without_uid(same) == without_uid(after)
            assert cached_admitter(server).hits == hits + 1


DRA_POLICY = """\
apiVersion: topoplace.io/v1alpha1
kind: PlacementPolicy
metadata:
  name: p
spec:
  namespaces: ["ml-*"]
  resources:
    cpuPerGpu: 4
    memoryPerGpu: 16Gi
  dra:
    gpu: {deviceClassName: gpu.nvidia.com}
    gpuCounts: [1, 2, 4, 8]
"""


async def test_a_new_claim_template_is_seen_by_the_next_admission(
    tmp_path: Path, tls_files: TlsFiles, client: aiohttp.ClientSession
) -> None:
    policies = tmp_path / "dra-policies"
    policies.mkdir()
    (policies / "p.yaml").write_text(DRA_POLICY)
    fake = ClaimsApiServer()
    fake.add_namespace("ml-team")
    async with running(fake) as url:
        kubeconfig = tmp_path / "claims-kubeconfig"
        cluster = {"name": "c", "cluster": {"server": url}}
        context = {"name": "c", "context": {"cluster": "c", "user": "u"}}
        kubeconfig.write_text(
            yaml.safe_dump(
                {
                    "apiVersion": "v1",
                    "kind": "Config",
                    "clusters": [cluster],
                    "users": [{"name": "u", "user": {}}],
                    "contexts": [context],
                    "current-context": "c",
                }
            )
        )
        config = server_config(
            policies, tls_files, claim_template_cache=True, kubeconfig=kubeconfig
        )
        async with WebhookServer(config) as server:
            templates = server.state.templates if server.state is not None else None
            assert isinstance(templates, ClaimTemplateStore)

            async def watching() -> bool:
                return templates.ready and fake.watching("templates")

            await wait_until(watching, "the template cache's list and watch")
            pod = gpu_pod(gpus=2, policy="p")
            first, again = await answers(client, server, pod)
            assert any("not in namespace ml-team yet" in w for w in first["response"]["warnings"])
            assert without_uid(first) == without_uid(again) and cached_admitter(server).hits == 1
            generation = templates.generation
            fake.put_template(template("ml-team", "topoplace-p-2gpu"))

            async def seen() -> bool:
                return templates.generation > generation

            await wait_until(seen, "the ADDED template")
            (after,) = await answers(client, server, pod, count=1)
            paths = {op["path"] for op in decode_patch(after["response"])}
            assert "/spec/resourceClaims" in paths
            assert not any("yet" in w for w in after["response"].get("warnings", []))


def test_the_hostname_is_cut_from_the_spec_as_the_api_server_writes_it() -> None:
    """kube-apiserver writes compact JSON; the key is cut from those bytes, never parsed."""

    def compact(pod: dict[str, Any]) -> ReviewRequest:
        return parse_review(json.dumps(admission_review(pod), separators=(",", ":")).encode())

    first, seventh = compact(job_pod(0)), compact(job_pod(7))
    assert first.pod is not None and first.pod.spec is not None
    assert b"hostname" not in first.pod.spec
    assert request_key(first) == request_key(seventh) is not None
    # The word elsewhere too (a nested key): not cut from the text; the parsed spec is
    # the key then, so the pods of the Job still share one.
    tricky = [job_pod(i) for i in (0, 7)]
    for pod in tricky:
        pod["spec"]["containers"][0]["env"] = [{"name": "hostname", "value": "x"}]
        pod["spec"]["nodeSelector"] = {"hostname": "gpu-node-1"}
    keys = [request_key(compact(pod)) for pod in tricky]
    assert compact(tricky[0]).pod.spec is None  # type: ignore[union-attr]
    assert keys[0] == keys[1] is not None and keys[0] != request_key(first)
