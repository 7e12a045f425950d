"""The pure halves of the wire protocol: request validation and the response builder."""

from __future__ import annotations

import base64
import json
from typing import Any

import pytest

from tests.webhook.server.conftest import REFERENCE_REVIEW, admission_review, gpu_pod
from webhook.server.pod_admission import build_response
from webhook.server.review import MalformedReview, parse_review
from webhook.warnings.lines import plain_line


def _body(doc: Any) -> bytes:
    return json.dumps(doc).encode()


def test_reference_review_parses_as_pod_create() -> None:
    parsed = parse_review(REFERENCE_REVIEW.read_bytes())
    assert parsed.uid == "3d4fc6c1-7906-47d9-b7da-fc2b22353643"
    assert parsed.is_pod_create
    assert parsed.namespace == "foo"
    assert parsed.dry_run is False


@pytest.mark.parametrize(
    ("mangle", "complaint"),
    [
        (lambda r: r.update(apiVersion="admission.k8s.io/v1beta1"), "admissionReviewVersions"),
        (lambda r: r.update(kind="Pod"), "kind must be 'AdmissionReview'"),
        (lambda r: r["request"].pop("uid"), "request.uid must be a string (got missing)"),
        (lambda r: r["request"].update(uid=""), "request.uid must not be empty"),
        (lambda r: r["request"].update(operation="PATCH"), "request.operation must be one of"),
        (lambda r: r.pop("request"), "request must be an object"),
        (lambda r: r["request"].update(object=None), "must hold the Pod"),
        (lambda r: r["request"]["object"].update(kind="Service"), "kind 'Service'"),
        (lambda r: r["request"]["object"].pop("spec"), "request.object.spec must be an object"),
        (
            lambda r: r["request"]["object"]["spec"].update(containers={"name": "x"}),
            "spec.containers must be a list",
        ),
        (
            lambda r: r["request"]["object"]["metadata"].update(labels={"a": 1}),
            "labels values must all be strings",
        ),
        (lambda r: r["request"].update(dryRun="yes"), "request.dryRun must be a boolean"),
    ],
)
def test_malformed_reviews_are_named(mangle: Any, complaint: str) -> None:
    review = admission_review(gpu_pod())
    mangle(review)
    with pytest.raises(MalformedReview, match=None) as caught:
        parse_review(_body(review))
    assert complaint in str(caught.value)


@pytest.mark.parametrize("body", [b"", b"{", b"\xff\xfe", b"[]", b"null", b'"AdmissionReview"'])
def test_non_object_bodies_are_malformed(body: bytes) -> None:
    with pytest.raises(MalformedReview):
        parse_review(body)


def test_non_pod_kinds_need_no_pod_object() -> None:
    deployment = admission_review(
        {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "d"}, "spec": {}},
        kind=("apps", "v1", "Deployment"),
        resource="deployments",
    )
    assert not parse_review(_body(deployment)).is_pod_create
    delete = admission_review(None, operation="DELETE", old=gpu_pod(name="p"))
    assert parse_review(_body(delete)).object is None


def test_response_echoes_uid_and_omits_patch_type_without_patch() -> None:
    out = build_response("u-1")
    assert out == {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "response": {"uid": "u-1", "allowed": True},
    }


def test_response_patch_is_base64_json_patch() -> None:
    ops = [{"op": "add", "path": "/metadata/annotations", "value": {"a": "ü"}}]
    out = build_response("u-2", patch=ops)["response"]
    assert out["patchType"] == "JSONPatch"
    assert json.loads(base64.b64decode(out["patch"])) == ops


def test_denial_carries_status_403_and_no_patch() -> None:
    out = build_response(
        "u-3",
        allowed=False,
        patch=[{"op": "add", "path": "/x", "value": 1}],
        status_message="namespace 'a' may not use policy 'b'",
    )["response"]
    assert out["allowed"] is False
    assert out["status"] == {"code": 403, "message": "namespace 'a' may not use policy 'b'"}
    assert "patch" not in out and "patchType" not in out


def test_warnings_are_prefixed_single_line_and_short() -> None:
    long = "container busybox: sets no cpu or memory; " * 12
    out = build_response("u-4", warnings=["short one", "two\nlines", long])["response"]
    short, joined, cut = out["warnings"]
    assert short == "topoplace: short one"
    assert joined == "topoplace: two lines"
    assert len(cut) <= 256 and cut.endswith("…") and cut.startswith("topoplace: container")
    assert " memor…" not in cut  # cut at a word boundary


def test_fitted_lines_follow_the_engine_warnings_and_are_not_cut_again() -> None:
    line = "topoplace: " + "x" * 212 + "; run `kubectl topoplace explain`"  # 256 characters
    out = build_response("u-5", warnings=["rounded up"], lines=[line])["response"]
    assert out["warnings"] == ["topoplace: rounded up", line]


def test_warning_of_exactly_the_limit_is_kept_whole() -> None:
    text = "x" * (256 - len("topoplace: "))
    assert plain_line(text) == "topoplace: " + text
    assert len(plain_line(text + "y")) == 256


def test_error_messages_do_not_echo_huge_values() -> None:
    review = admission_review(gpu_pod())
    review["request"]["operation"] = "X" * 100_000
    with pytest.raises(MalformedReview) as caught:
        parse_review(_body(review))
    assert len(str(caught.value)) < 200


def test_a_pod_create_is_read_from_its_head_and_its_pod_parsed_when_read() -> None:
    review = admission_review(gpu_pod())
    parsed = parse_review(_body(review))
    assert parsed.pod is not None  # the answer cache's view: metadata and the spec's text
    assert parsed.pod.meta.labels == review["request"]["object"]["metadata"]["labels"]
    assert json.loads(parsed.pod.spec or b"") == review["request"]["object"]["spec"]
    assert parsed.object == review["request"]["object"]


def test_bytes_the_head_skips_are_still_checked() -> None:
    """msgspec skips members it has no field for without checking their UTF-8: the body
    is still refused, as reading it whole refuses it."""
    body = _body(admission_review(gpu_pod())).replace(b'"username": "', b'"username": "\xff')
    assert b"\xff" in body
    with pytest.raises(MalformedReview, match="not JSON"):
        parse_review(body)
