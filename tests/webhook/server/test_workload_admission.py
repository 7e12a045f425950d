"""Workloads over real HTTPS: a Job or JobSet CREATE gets its pods' patch under each template."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import aiohttp
import jsonpatch
import pytest

from tests.kube import assert_valid
from tests.webhook.server.conftest import (
    TlsFiles,
    admission_review,
    decode_patch,
    gpu_pod,
    post_review,
    sent_warnings,
    server_config,
)
from webhook.engine.outcome import EngineSettings
from webhook.server.runner import WebhookServer
from webhook.vocabulary import POLICY_LABEL

JOB = ("batch", "v1", "Job")
JOBSET = ("jobset.x-k8s.io", "v1alpha2", "JobSet")


def job(*, job_policy: str | None = None, template_policy: str | None = "ddp") -> dict[str, Any]:
    pod = gpu_pod(policy=template_policy)
    labels = {"kueue.x-k8s.io/queue-name": "team"}
    if job_policy is not None:
        labels[POLICY_LABEL] = job_policy
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": "train", "namespace": "ml-team", "labels": labels},
        "spec": {
            "suspend": True,
            "template": {"metadata": {"labels": pod["metadata"]["labels"]}, "spec": pod["spec"]},
        },
    }


def jobset(replicated: int) -> dict[str, Any]:
    template = job()["spec"]["template"]
    return {
        "apiVersion": "jobset.x-k8s.io/v1alpha2",
        "kind": "JobSet",
        "metadata": {"name": "llm", "namespace": "ml-team"},
        "spec": {
            "replicatedJobs": [
                {"name": f"w{i}", "replicas": 1, "template": {"spec": {"template": template}}}
                for i in range(replicated)
            ]
        },
    }


async def test_a_job_create_is_mutated_and_its_pod_then_gets_an_empty_patch(
    server: WebhookServer, client: aiohttp.ClientSession
) -> None:
    obj = job(job_policy="ddp", template_policy=None)
    review = admission_review(obj, kind=JOB, resource="jobs")
    status, answer = await post_review(client, server.url, review)
    assert status == 200 and answer["response"]["allowed"] is True
    patch = decode_patch(answer["response"])
    assert patch and all(op["path"].startswith("/spec/template/") for op in patch)
    stored = jsonpatch.apply_patch(obj, patch)
    assert_valid(stored)
    template = stored["spec"]["template"]
    assert template["metadata"]["labels"][POLICY_LABEL] == "ddp"
    assert template["spec"]["containers"][0]["resources"]["requests"]["cpu"] == "8"
    # The job controller creates the pod from the stored template: nothing left to do.
    pod = {"apiVersion": "v1", "kind": "Pod", **template}
    pod["metadata"] = {**template["metadata"], "generateName": "train-"}
    status, answer = await post_review(client, server.url, admission_review(pod))
    assert status == 200 and answer["response"]["allowed"] is True
    assert decode_patch(answer["response"]) == []


@pytest.mark.parametrize("operation", ["UPDATE", "DELETE"])
async def test_only_create_is_mutated(
    server: WebhookServer, client: aiohttp.ClientSession, operation: str
) -> None:
    obj = job()
    review = admission_review(
        obj if operation == "UPDATE" else None,
        kind=JOB,
        resource="jobs",
        operation=operation,
        old=obj,
    )
    status, answer = await post_review(client, server.url, review)
    assert status == 200 and answer["response"] == {
        "uid": review["request"]["uid"],
        "allowed": True,
    }


async def test_every_template_of_a_jobset_is_patched(
    server: WebhookServer, client: aiohttp.ClientSession
) -> None:
    obj = jobset(4)
    review = admission_review(obj, kind=JOBSET, resource="jobsets")
    status, answer = await post_review(client, server.url, review)
    assert status == 200
    stored = jsonpatch.apply_patch(obj, decode_patch(answer["response"]))
    for replicated in stored["spec"]["replicatedJobs"]:
        requests = replicated["template"]["spec"]["template"]["spec"]["containers"][0]
        assert requests["resources"]["requests"]["cpu"] == "8"


async def test_a_workload_without_the_label_passes_through(
    server: WebhookServer, client: aiohttp.ClientSession
) -> None:
    review = admission_review(job(template_policy=None), kind=JOB, resource="jobs")
    status, answer = await post_review(client, server.url, review)
    assert status == 200 and answer["response"] == {
        "uid": review["request"]["uid"],
        "allowed": True,
    }


async def test_an_unreadable_template_is_admitted_unchanged_with_a_warning(
    server: WebhookServer, client: aiohttp.ClientSession
) -> None:
    obj = jobset(2)
    obj["spec"]["replicatedJobs"][1]["template"]["spec"]["template"] = {
        "metadata": {"labels": {POLICY_LABEL: "ddp"}},
        "spec": {"containers": [{"name": "trainer", "command": "not a list"}]},
    }
    review = admission_review(obj, kind=JOBSET, resource="jobsets")
    status, answer = await post_review(client, server.url, review)
    response = answer["response"]
    assert status == 200 and response["allowed"] is True
    assert any("replicatedJobs[1]" in w and "cannot read" in w for w in response["warnings"])
    assert {op["path"].split("/")[3] for op in decode_patch(response)} == {"0"}
    # The workload's warnings are counted as the engine's, under its policy.
    assert await sent_warnings(client, server, "ddp") == {"engine": len(response["warnings"])}


async def test_a_missing_policy_is_refused_only_when_the_webhook_says_deny(
    policy_dir: Path, tls_files: TlsFiles, client: aiohttp.ClientSession
) -> None:
    review = admission_review(job(template_policy="nope"), kind=JOB, resource="jobs")
    config = server_config(policy_dir, tls_files)
    async with WebhookServer(config) as warn:
        _, answer = await post_review(client, warn.url, review)
    assert answer["response"]["allowed"] is True and "patch" not in answer["response"]
    assert any("'nope'" in w for w in answer["response"]["warnings"])
    deny = server_config(policy_dir, tls_files, settings=EngineSettings(on_missing_policy="deny"))
    async with WebhookServer(deny) as refusing:
        _, answer = await post_review(client, refusing.url, review)
    response = answer["response"]
    assert response["allowed"] is False and response["status"]["code"] == 403
    assert "spec.template: placement policy 'nope' does not exist" in response["status"]["message"]
