"""Real AdmissionReview v1 bodies against the real server over TLS on 127.0.0.1."""

from __future__ import annotations

import asyncio
import json
import logging
import socket
from pathlib import Path
from typing import Any

import aiohttp
import jsonpatch
import pytest

from tests.kube import assert_valid, qos_class
from tests.webhook.server.conftest import (
    REFERENCE_REVIEW,
    TlsFiles,
    admission_review,
    decode_patch,
    gpu_pod,
    post_review,
    sent_warnings,
    server_config,
)
from webhook.server.runner import WebhookServer
from webhook.warnings.lines import LIMIT


def _patched(review: dict[str, Any], response: dict[str, Any]) -> dict[str, Any]:
    return jsonpatch.apply_patch(review["request"]["object"], decode_patch(response))


async def test_documentation_pod_without_label_is_allowed_unchanged(
    server: WebhookServer, client: aiohttp.ClientSession
) -> None:
    review = json.loads(REFERENCE_REVIEW.read_text())
    status, answer = await post_review(client, server.url, review)
    assert status == 200
    assert answer == {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "response": {"uid": review["request"]["uid"], "allowed": True},
    }


async def test_documentation_pod_with_label_gets_a_valid_patch(
    server: WebhookServer, client: aiohttp.ClientSession
) -> None:
    review = json.loads(REFERENCE_REVIEW.read_text())
    review["request"]["object"]["metadata"]["labels"] = {"topoplace.io/policy": "ddp"}
    status, answer = await post_review(client, server.url, review)
    assert status == 200
    response = answer["response"]
    assert response["uid"] == review["request"]["uid"] and response["allowed"] is True
    assert response["patchType"] == "JSONPatch"
    pod = _patched(review, response)
    assert_valid(pod)
    assert qos_class(pod) == "Guaranteed"
    warnings = response["warnings"]
    assert all(w.startswith("topoplace: ") and len(w) <= LIMIT for w in warnings)


async def test_controller_pod_without_namespace_is_mutated_and_valid(
    server: WebhookServer, client: aiohttp.ClientSession
) -> None:
    # Controllers create pods with generateName and no metadata.namespace; the namespace the
    # policy's allowlist is checked against comes from request.namespace.
    review = admission_review(gpu_pod(gpus=2), namespace="ml-team")
    assert "namespace" not in review["request"]["object"]["metadata"]
    status, answer = await post_review(client, server.url, review)
    assert status == 200
    pod = _patched(review, answer["response"])
    assert_valid(pod)
    assert qos_class(pod) == "Guaranteed"
    trainer = pod["spec"]["containers"][0]
    assert trainer["command"][:2] == ["torchrun", "--numa-binding=node"]
    assert {"name": "MARK", "value": "one"} in trainer["env"]
    assert trainer["resources"]["limits"]["cpu"] == "8"  # cpuPerGpu 4 x 2 GPUs
    # The projected service-account volume the admission chain added is untouched.
    assert pod["spec"]["volumes"] == review["request"]["object"]["spec"]["volumes"]
    terms = pod["spec"]["affinity"]["nodeAffinity"][
        "requiredDuringSchedulingIgnoredDuringExecution"
    ]
    assert terms["nodeSelectorTerms"]

    # Reinvocation (reinvocationPolicy: IfNeeded) on the mutated pod changes nothing.
    again = admission_review(pod, namespace="ml-team")
    status, answer = await post_review(client, server.url, again)
    assert status == 200 and "patch" not in answer["response"]


async def test_dry_run_gets_the_same_answer(
    server: WebhookServer, client: aiohttp.ClientSession
) -> None:
    pod = gpu_pod()
    _, real = await post_review(client, server.url, admission_review(pod, uid="a"))
    _, dry = await post_review(client, server.url, admission_review(pod, uid="b", dry_run=True))
    assert dry["response"]["uid"] == "b"
    assert decode_patch(dry["response"]) == decode_patch(real["response"]) != []


@pytest.mark.parametrize("operation", ["UPDATE", "DELETE", "CONNECT"])
async def test_other_operations_pass_through(
    server: WebhookServer, client: aiohttp.ClientSession, operation: str
) -> None:
    pod = gpu_pod(name="train-1")
    obj = None if operation == "DELETE" else pod
    if operation == "CONNECT":
        obj = {"kind": "PodExecOptions", "apiVersion": "v1", "command": ["sh"], "stdin": True}
    review = admission_review(obj, operation=operation, old=pod if operation != "CONNECT" else None)
    status, answer = await post_review(client, server.url, review)
    assert status == 200
    assert answer["response"] == {"uid": review["request"]["uid"], "allowed": True}


async def test_a_kind_the_webhook_does_not_mutate_passes_through(
    server: WebhookServer, client: aiohttp.ClientSession
) -> None:
    template = gpu_pod()
    deployment = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "train"},
        "spec": {"template": {"metadata": template["metadata"], "spec": template["spec"]}},
    }
    review = admission_review(deployment, kind=("apps", "v1", "Deployment"), resource="deployments")
    status, answer = await post_review(client, server.url, review)
    assert status == 200 and answer["response"] == {
        "uid": review["request"]["uid"],
        "allowed": True,
    }


async def test_mirror_pod_is_never_touched(
    server: WebhookServer, client: aiohttp.ClientSession
) -> None:
    pod = gpu_pod(name="static-trainer-node1")
    pod["metadata"]["annotations"] = {"kubernetes.io/config.mirror": "6f1c0a"}
    status, answer = await post_review(client, server.url, admission_review(pod))
    assert status == 200 and "patch" not in answer["response"]


async def test_policy_denial_is_a_normal_response(
    server: WebhookServer, client: aiohttp.ClientSession
) -> None:
    review = admission_review(gpu_pod(policy="prod-only"), namespace="ml-team")
    status, answer = await post_review(client, server.url, review)
    assert status == 200
    response = answer["response"]
    assert response["allowed"] is False and "patch" not in response
    assert response["status"]["code"] == 403
    assert "prod-only" in response["status"]["message"]


async def test_unknown_policy_admits_with_a_warning(
    server: WebhookServer, client: aiohttp.ClientSession
) -> None:
    status, answer = await post_review(client, server.url, admission_review(gpu_pod(policy="nope")))
    response = answer["response"]
    assert status == 200 and response["allowed"] is True and "patch" not in response
    assert any("'nope'" in w for w in response["warnings"])


@pytest.mark.parametrize(
    ("body", "complaint"),
    [
        (b"not json", "not JSON"),
        (
            json.dumps({"apiVersion": "admission.k8s.io/v1beta1", "kind": "AdmissionReview"}),
            "admission.k8s.io/v1",
        ),
        (json.dumps({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview"}), "request"),
    ],
)
async def test_malformed_bodies_get_400_with_a_message(
    server: WebhookServer, client: aiohttp.ClientSession, body: bytes | str, complaint: str
) -> None:
    data = body.encode() if isinstance(body, str) else body
    status, text = await post_review(client, server.url, data)
    assert status == 400 and complaint in text


async def test_object_that_is_not_a_pod_gets_400(
    server: WebhookServer, client: aiohttp.ClientSession
) -> None:
    review = admission_review({"apiVersion": "v1", "kind": "Service", "spec": {}})
    status, text = await post_review(client, server.url, review)
    assert status == 400 and "kind 'Service'" in text


async def test_a_container_field_of_the_wrong_type_gets_400_naming_it(
    server: WebhookServer, client: aiohttp.ClientSession
) -> None:
    pod = gpu_pod()
    pod["spec"]["containers"][0]["command"] = ["torchrun", 8]
    status, text = await post_review(client, server.url, admission_review(pod))
    assert status == 400 and "spec.containers[0].command must be a list of strings" in text


async def test_a_pod_without_containers_gets_400_and_no_patch(
    server: WebhookServer, client: aiohttp.ClientSession
) -> None:
    pod = gpu_pod()
    pod["spec"]["containers"] = []
    status, text = await post_review(client, server.url, admission_review(pod))
    assert status == 400 and "spec.containers must hold at least one container" in text


async def test_oversized_body_gets_400_and_server_keeps_serving(
    policy_dir: Path, tls_files: TlsFiles, client: aiohttp.ClientSession
) -> None:
    config = server_config(policy_dir, tls_files, max_body_bytes=64 * 1024)
    async with WebhookServer(config) as server:
        pod = gpu_pod()
        pod["metadata"]["annotations"] = {"big": "x" * (100 * 1024)}
        status, text = await post_review(client, server.url, admission_review(pod))
        assert status == 400 and "65536-byte limit" in text
        status, _ = await post_review(client, server.url, admission_review(gpu_pod()))
        assert status == 200


async def test_trailing_slash_health_and_readiness(
    server: WebhookServer, client: aiohttp.ClientSession
) -> None:
    status, answer = await post_review(client, server.url + "/", admission_review(gpu_pod()))
    assert status == 200 and "patch" in answer["response"]
    base = server.url.removesuffix("/mutate")
    for path, expected in (("/healthz", "ok"), ("/readyz", "ready")):
        async with client.get(base + path) as resp:
            assert resp.status == 200 and (await resp.text()).strip() == expected


async def test_one_access_log_line_per_admission(
    server: WebhookServer, client: aiohttp.ClientSession, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    review = admission_review(gpu_pod(), namespace="ml-team")
    _, answer = await post_review(client, server.url, review)
    await post_review(client, server.url, b"{")
    lines = [r for r in caplog.records if r.name == "webhook.access"]
    assert len(lines) == 2
    first = lines[0].__dict__
    assert first["uid"] == review["request"]["uid"]
    assert first["namespace"] == "ml-team" and first["pod"] == "train-7f9c-0-"
    assert first["policy"] == "ddp" and first["outcome"] == "mutated"
    assert first["patch_ops"] == len(decode_patch(answer["response"])) > 0
    assert first["latency_ms"] >= 0
    assert lines[1].__dict__["outcome"] == "malformed"


async def test_engine_crash_fails_open_with_warning(
    policy_dir: Path,
    tls_files: TlsFiles,
    client: aiohttp.ClientSession,
    caplog: pytest.LogCaptureFixture,
) -> None:
    def broken_engine(*_args: Any) -> Any:
        raise KeyError("bug")

    config = server_config(policy_dir, tls_files)
    async with WebhookServer(config, mutate=broken_engine) as server:
        review = admission_review(gpu_pod())
        status, answer = await post_review(client, server.url, review)
        assert status == 200
        response = answer["response"]
        assert response["allowed"] is True and "patch" not in response
        assert "internal error" in response["warnings"][0]
        crash = [
            r for r in caplog.records if r.exc_info and r.name == "webhook.server.pod_admission"
        ]
        assert crash and crash[0].__dict__["uid"] == review["request"]["uid"]
        # Pods that did not opt in never reach the engine.
        status, answer = await post_review(
            client, server.url, admission_review(gpu_pod(policy=None))
        )
        assert status == 200 and "warnings" not in answer["response"]


async def test_metrics_count_outcomes_with_bounded_policy_labels(
    server: WebhookServer, client: aiohttp.ClientSession
) -> None:
    await post_review(client, server.url, admission_review(gpu_pod()))
    await post_review(client, server.url, admission_review(gpu_pod(policy=None)))
    for i in range(3):  # attacker-chosen policy names must not become label values
        await post_review(client, server.url, admission_review(gpu_pod(policy=f"junk-{i}")))
    await post_review(client, server.url, b"[]")
    async with client.get(f"http://127.0.0.1:{server.metrics_port}/metrics") as resp:
        assert resp.status == 200
        text = await resp.text()
    samples = {
        line.rsplit(" ", 1)[0]: float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line and not line.startswith("#")
    }
    name = "topoplace_webhook_admission_requests_total"
    assert samples[f'{name}{{outcome="mutated",policy="ddp"}}'] == 1
    assert samples[f'{name}{{outcome="passthrough",policy="none"}}'] == 1
    assert samples[f'{name}{{outcome="unchanged",policy="unknown"}}'] == 3
    assert samples[f'{name}{{outcome="malformed",policy="none"}}'] == 1
    assert "junk" not in text
    assert samples["topoplace_webhook_admission_duration_seconds_count"] == 6
    assert 'topoplace_webhook_admission_duration_seconds_bucket{le="0.0001"}' in samples
    assert samples["topoplace_webhook_policies_loaded"] == 2
    assert samples["topoplace_webhook_policy_set_generation"] == 1


async def test_metrics_port_in_use_fails_startup_and_stops_the_watchers(
    policy_dir: Path, tls_files: TlsFiles
) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        config = server_config(policy_dir, tls_files, metrics_port=taken.getsockname()[1])
        with pytest.raises(OSError):
            async with WebhookServer(config):
                pass
    await asyncio.sleep(0)
    leftover = {t.get_name() for t in asyncio.all_tasks()} & {"policy-watch", "tls-watch"}
    assert not leftover


async def test_metrics_can_be_turned_off(
    policy_dir: Path, tls_files: TlsFiles, client: aiohttp.ClientSession
) -> None:
    async with WebhookServer(server_config(policy_dir, tls_files, metrics_port=None)) as server:
        assert server.metrics_port is None
        status, _ = await post_review(client, server.url, admission_review(gpu_pod()))
        assert status == 200


async def test_metrics_count_the_engines_warnings_and_a_fail_open_by_kind(
    policy_dir: Path, tls_files: TlsFiles, client: aiohttp.ClientSession
) -> None:
    def broken_engine(*_args: Any) -> Any:
        raise KeyError("bug")

    async with WebhookServer(server_config(policy_dir, tls_files)) as server:
        assert await sent_warnings(client, server, "ddp") == {}
        _, answer = await post_review(client, server.url, admission_review(gpu_pod(gpus=0)))
        sent = answer["response"]["warnings"]
        assert any("the pod requests no GPU" in w for w in sent)
        assert await sent_warnings(client, server, "ddp") == {"engine": len(sent)}
    async with WebhookServer(server_config(policy_dir, tls_files), mutate=broken_engine) as server:
        await post_review(client, server.url, admission_review(gpu_pod()))
        assert await sent_warnings(client, server, "ddp") == {"internal_error": 1}
