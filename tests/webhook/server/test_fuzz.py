"""Fuzzing: random and half-valid bodies never crash the server or get anything but
200 + a well-formed AdmissionReview or 400 + a message.

Most cases drive the real aiohttp app in-process (aiohttp's TestServer, plain HTTP) because
that is fast; a smaller set goes over real TLS to the full server.
"""

from __future__ import annotations

import base64
import json
import random
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import jsonpatch
import pytest
from aiohttp.test_utils import TestClient, TestServer
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.webhook.server.conftest import admission_review, gpu_pod
from webhook.engine.outcome import EngineSettings
from webhook.policy.loader import load_policy_dir
from webhook.server import review
from webhook.server.app import WebhookState, make_app
from webhook.server.metrics import WebhookMetrics
from webhook.server.pod_admission import PolicyAdmitter
from webhook.server.reload import PolicyStore
from webhook.server.review import MalformedReview, ReviewRequest, parse_review
from webhook.server.runner import WebhookServer
from webhook.warnings.lines import LIMIT

# Values are built from a seed with the stdlib PRNG: hypothesis's recursive strategies cost
# several ms per example here, and thousands of cases must fit in seconds. Failures still
# reproduce (the seed is the example) and hypothesis still shrinks the seed and the choices.
_SCALARS: tuple[Any, ...] = (
    None,
    True,
    False,
    0,
    -1,
    2**64,
    1.5,
    -0.0,
    1e308,
    "",
    "x",
    "CREATE",
    "Pod",
    "v1",
    "ddp",
    "8",
    "0.5",
    "1e9",
    "é\u0000\ud7ff",
    "../../etc",
    "a" * 300,
)
_KEYS: tuple[str, ...] = (
    "apiVersion",
    "kind",
    "request",
    "uid",
    "operation",
    "object",
    "metadata",
    "labels",
    "annotations",
    "spec",
    "containers",
    "initContainers",
    "resources",
    "limits",
    "requests",
    "nvidia.com/gpu",
    "cpu",
    "command",
    "args",
    "namespace",
    "dryRun",
    "topoplace.io/policy",
    "topoplace.io/applied",
    "kubernetes.io/config.mirror",
    "name",
    "generateName",
    "env",
    "affinity",
    "volumes",
)


def _random_json(rng: random.Random, depth: int = 0) -> Any:
    roll = rng.random()
    if depth >= 3 or roll < 0.55:
        if roll < 0.1:
            return rng.uniform(-1e6, 1e6)
        if roll < 0.2:
            return "".join(chr(rng.randrange(0x20, 0x2FFF)) for _ in range(rng.randrange(6)))
        return rng.choice(_SCALARS)
    if roll < 0.75:
        return [_random_json(rng, depth + 1) for _ in range(rng.randrange(4))]
    return {rng.choice(_KEYS): _random_json(rng, depth + 1) for _ in range(rng.randrange(4))}


def _nodes(doc: Any) -> list[Any]:
    """Every dict/list node in `doc`, so an edit can land anywhere in it."""
    pending, out = [doc], []
    while pending:
        node = pending.pop()
        if isinstance(node, dict | list):
            out.append(node)
            pending.extend(node.values() if isinstance(node, dict) else node)
    return out


_TEMPLATES = [
    json.dumps(admission_review(gpu_pod(gpus=g, policy=p), operation=op, namespace=ns))
    for g, p, op, ns in (
        (2, "ddp", "CREATE", "ml-team"),
        (8, "ddp", "CREATE", None),
        (1, "prod-only", "CREATE", "ml-team"),
        (0, "missing", "CREATE", "prod"),
        (4, None, "CREATE", "ml-team"),
        (2, "ddp", "UPDATE", "ml-team"),
    )
]


def _mangled_review(seed: int, edits: int) -> bytes:
    """A real review (opted-in or not) with a few random edits anywhere inside it."""
    rng = random.Random(seed)
    doc = json.loads(rng.choice(_TEMPLATES))
    doc["request"]["dryRun"] = rng.random() < 0.3
    for _ in range(edits):
        node = rng.choice(_nodes(doc))
        if isinstance(node, dict):
            if node and rng.random() < 0.4:
                node.pop(rng.choice(sorted(node)))
            else:
                node[rng.choice([*_KEYS, *node])] = _random_json(rng)
        elif node:
            node[rng.randrange(len(node))] = _random_json(rng)
    return json.dumps(doc).encode()


def _wrapped_request(seed: int) -> bytes:
    rng = random.Random(seed)
    request = _random_json(rng)
    if isinstance(request, dict) and rng.random() < 0.5:
        request.update(
            uid=str(seed), operation="CREATE", kind={"group": "", "version": "v1", "kind": "Pod"}
        )
    doc = {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": request}
    return json.dumps(doc).encode()


_SEEDS = st.integers(0, 2**32)
_BODIES = st.one_of(
    st.builds(_mangled_review, _SEEDS, st.integers(0, 3)),
    st.builds(_mangled_review, _SEEDS, st.integers(0, 3)),
    _SEEDS.map(lambda seed: json.dumps(_random_json(random.Random(seed))).encode()),
    st.builds(_wrapped_request, _SEEDS),
    st.binary(max_size=64),
)


def _check_answer(status: int, content_type: str, payload: bytes, body: bytes) -> None:
    if status == 400:
        assert payload.strip(), "400 must carry a message"
        return
    assert status == 200, (status, payload[:200])
    assert content_type == "application/json"
    answer = json.loads(payload)
    sent = json.loads(body)
    assert answer["apiVersion"] == "admission.k8s.io/v1" and answer["kind"] == "AdmissionReview"
    response = answer["response"]
    assert response["uid"] == sent["request"]["uid"]
    assert isinstance(response["allowed"], bool)
    for warning in response.get("warnings", []):
        assert warning.startswith("topoplace: ") and len(warning) <= LIMIT
    if "patch" in response:
        assert response["patchType"] == "JSONPatch" and response["allowed"] is True
        ops = json.loads(base64.b64decode(response["patch"], validate=True))
        jsonpatch.apply_patch(sent["request"]["object"], ops)
    else:
        assert "patchType" not in response
    if not response["allowed"]:
        assert response["status"]["code"] == 403 and response["status"]["message"]


@pytest.fixture
async def app_client(policy_dir: Any) -> AsyncIterator[TestClient[Any, Any]]:
    store = PolicyStore(load_policy_dir(policy_dir))
    state = WebhookState(
        admitter=PolicyAdmitter(lambda: store.current, EngineSettings()),
        metrics=WebhookMetrics(),
        store=store,
        max_body_bytes=16 * 1024,
    )
    async with TestClient(TestServer(make_app(state))) as client:
        yield client


_FAST = settings(
    max_examples=900,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)


@_FAST
@given(body=_BODIES)
async def test_fuzz_in_process(app_client: TestClient[Any, Any], body: bytes) -> None:
    async with app_client.post("/mutate", data=body) as resp:
        _check_answer(resp.status, resp.content_type, await resp.read(), body)


async def test_oversized_body_is_400_not_413_in_process(
    app_client: TestClient[Any, Any],
) -> None:
    # Oversized bodies are also input: 400, not 413, and the next request is fine.
    async with app_client.post("/mutate", data=b"[" + b"0," * 20_000 + b"0]") as resp:
        assert resp.status == 400 and "limit" in await resp.text()
    async with app_client.get("/healthz") as resp:
        assert resp.status == 200


@settings(
    max_examples=200,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(body=_BODIES)
async def test_fuzz_over_tls(
    server: WebhookServer, client: aiohttp.ClientSession, body: bytes
) -> None:
    async with client.post(server.url, data=body) as resp:
        _check_answer(resp.status, resp.content_type, await resp.read(), body)


@settings(max_examples=600, deadline=None)
@given(body=_BODIES)
def test_fuzz_parse_review_raises_only_malformed(body: bytes) -> None:
    try:
        parsed = parse_review(body)
    except MalformedReview as exc:
        assert str(exc)
    else:
        assert parsed.uid and parsed.operation in ("CREATE", "UPDATE", "DELETE", "CONNECT")


@settings(max_examples=600, deadline=None)
@given(body=_BODIES)
def test_the_head_and_the_whole_reading_agree(body: bytes) -> None:
    """The usual request is read from its head (msgspec) and its pod parsed only when read:
    for any body, that accepts and refuses what reading it whole does, and reads the same."""
    try:
        whole: ReviewRequest | None = review._read_whole(body)
    except MalformedReview:
        whole = None
    try:
        fast: ReviewRequest | None = parse_review(body)
        assert fast is not None
        fast_object = fast.object  # a pod's problems may only show once it is parsed
    except MalformedReview:
        fast = None
    assert (fast is None) == (whole is None), (fast, whole)
    if fast is not None and whole is not None:
        fields = ("uid", "operation", "kind", "namespace", "name", "dry_run")
        assert [getattr(fast, f) for f in fields] == [getattr(whole, f) for f in fields]
        assert fast_object == whole.object
