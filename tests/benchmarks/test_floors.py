"""The floors of issue 47: the in-process floor writes our server's answer byte for byte, the
bare webhooks (aiohttp, Go net/http) answer a real AdmissionReview over TLS with our patch
and the request's uid, and their cluster objects are our webhook's in every setting that
shapes the API server's call."""

from __future__ import annotations

import base64
import json
import os
import shutil
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from cryptography import x509

from benchmarks.e2e.bench_e2e import _bodies, _our_patch, _ratios, _table
from benchmarks.peers.bare import BARE_PEERS, NAMESPACE, bare_objects
from benchmarks.peers.floor import Given, given_of, respond
from benchmarks.peers.map_policy import PEER_LABEL
from benchmarks.procs import Server, start_server
from benchmarks.webhook.breakdown_miss import _KINDS
from benchmarks.webhook.breakdown_miss import _table as breakdown_table
from benchmarks.webhook.servers import write_serving_pair
from benchmarks.webhook.workload import admission_review, worker_pod
from webhook import jsonio
from webhook.server.pod_admission import build_response

_REPO = Path(__file__).resolve().parents[2]
_OURS = _REPO / "manifests" / "base" / "webhook" / "mutatingwebhookconfiguration.yaml"
_WARNING = "topoplace: pod fits 3 of 60 nodes"


def _uid(body: bytes) -> str:
    return str(jsonio.loads(body)["request"]["uid"])


def test_the_floor_writes_the_bytes_our_server_writes() -> None:
    body = admission_review(worker_pod(gpus=4, index=7))
    patch = _our_patch("ml-bench-test")
    ours = jsonio.dumps(build_response(_uid(body), patch=patch, lines=[_WARNING]))
    assert respond(body, Given(patch, [_WARNING])) == ours
    assert given_of(ours) == Given(patch, [_WARNING])
    plain = jsonio.dumps(build_response(_uid(body)))
    assert respond(body, given_of(plain)) == plain  # no patch: no patchType either


@pytest.fixture
def pair_and_patch(tmp_path: Path) -> tuple[list[str], Path, list[dict[str, Any]]]:
    _ca, cert, key = write_serving_pair(tmp_path)
    patch = _our_patch("ml-bench-test")
    patch_file = tmp_path / "patch.json"
    patch_file.write_bytes(jsonio.dumps(patch))
    return ["--tls-cert", str(cert), "--tls-key", str(key)], patch_file, patch


def _post(server: Server, body: bytes) -> tuple[int, bytes]:
    import ssl

    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE  # the test's own pair; the server is on loopback
    request = urllib.request.Request(
        server.url, data=body, headers={"Content-Type": "application/json"}
    )
    try:
        with urllib.request.urlopen(request, context=context, timeout=10) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()


@pytest.fixture
def bare_aiohttp(
    tmp_path: Path, pair_and_patch: tuple[list[str], Path, list[dict[str, Any]]]
) -> Iterator[Server]:
    tls, patch_file, _ = pair_and_patch
    argv = [
        sys.executable,
        "-m",
        "benchmarks.peers.bare_server",
        *tls,
        "--patch-file",
        str(patch_file),
    ]
    env = {**os.environ, "PYTHONPATH": str(_REPO)}
    server = start_server("bare-aiohttp", argv, log=tmp_path / "bare.log", env=env)
    yield server
    assert server.stop() == 0


def test_bare_aiohttp_answers_each_review_with_its_uid_and_our_patch(
    bare_aiohttp: Server, pair_and_patch: tuple[list[str], Path, list[dict[str, Any]]]
) -> None:
    patch = pair_and_patch[2]
    for index in (1, 2):
        body = admission_review(worker_pod(gpus=4, index=index))
        status, answer = _post(bare_aiohttp, body)
        assert status == 200
        assert answer == respond(body, Given(patch, []))
        response = json.loads(answer)["response"]
        assert response["uid"] == _uid(body)
        assert json.loads(base64.b64decode(response["patch"])) == patch
    assert _post(bare_aiohttp, b'{"request": 1}')[0] == 400


@pytest.mark.skipif(shutil.which("go") is None, reason="the bare Go webhook needs Go on PATH")
def test_bare_go_answers_what_bare_aiohttp_answers(
    tmp_path: Path,
    bare_aiohttp: Server,
    pair_and_patch: tuple[list[str], Path, list[dict[str, Any]]],
) -> None:
    tls, patch_file, _ = pair_and_patch
    built = subprocess.run(
        ["bash", str(_REPO / "e2e" / "build-bare-webhook.sh")],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    argv = [built, *tls, "--host", "127.0.0.1", "--port", "0", "--patch-file", str(patch_file)]
    go = start_server("bare-go", argv, log=tmp_path / "go.log")
    try:
        body = admission_review(worker_pod(gpus=4, index=3))
        assert _post(go, body) == _post(bare_aiohttp, body)  # same status, same bytes
        assert _post(go, b"not json")[0] == 400
    finally:
        go.stop()


def _ours() -> dict[str, Any]:
    return next(
        w for w in yaml.safe_load(_OURS.read_text())["webhooks"] if w["name"].startswith("pods.")
    )


@pytest.mark.parametrize("peer", BARE_PEERS)
def test_bare_peers_are_called_as_ours_is_for_their_own_pods(peer: str) -> None:
    go = Path("/cache/barewebhook-0123") if peer == "bare-go" else None
    secret, deployment, service, config = bare_objects(peer, _our_patch("ml-bench-test"), go)
    (webhook,) = config["webhooks"]
    ours = _ours()
    differ = {"name", "clientConfig", "objectSelector", "namespaceSelector"}
    assert {k: v for k, v in webhook.items() if k not in differ} == {
        k: v for k, v in ours.items() if k not in differ
    }
    assert webhook["objectSelector"] == {"matchLabels": {PEER_LABEL: peer}}
    called = webhook["clientConfig"]["service"]
    assert called == {**ours["clientConfig"]["service"], "name": peer, "namespace": NAMESPACE}
    assert service["spec"]["selector"] == deployment["spec"]["selector"]["matchLabels"]
    assert service["spec"]["ports"][0]["port"] == 443
    cert = x509.load_pem_x509_certificate(base64.b64decode(secret["data"]["tls.crt"]))
    names = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert f"{peer}.{NAMESPACE}.svc" in names.get_values_for_type(x509.DNSName)
    assert json.loads(base64.b64decode(secret["data"]["patch.json"])) == _our_patch("ml-bench-test")
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    assert (container["command"][0] == str(go)) == (peer == "bare-go")
    assert "--host=$(POD_IP)" in container["command"]  # pods share the host's network here
    assert {"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}} in (
        container["env"]
    )


def test_the_bare_rows_sit_beside_the_peers_with_issue_47s_goals() -> None:
    paths = ["none", "webhook", "map", *BARE_PEERS]
    bodies = {k: json.loads(v) for k, v in _bodies(["map", *BARE_PEERS]).items()}
    assert [bodies[p]["metadata"]["labels"].get(PEER_LABEL) for p in BARE_PEERS] == list(BARE_PEERS)
    added = {"none": 0.0, "webhook": 4.0, "map": 2.0, "bare-aiohttp": 3.2, "bare-go": 1.0}
    samples = {p: [5.0 + added[p]] * 3 for p in paths}
    rows = {r["pod create"]: r for r in _table(samples, ["map", *BARE_PEERS])}
    assert rows["(e) bare aiohttp webhook (parse, fixed patch)"]["added p50 ms"] == pytest.approx(
        3.2
    )
    ratios = {r["ratio"]: r for r in _ratios(samples, ["map", *BARE_PEERS])}
    assert ratios["ours ÷ bare aiohttp"]["added p50"] == pytest.approx(1.25)
    assert ratios["ours ÷ bare aiohttp"]["goal (p50)"] == "≤ 1.25"
    assert ratios["ours ÷ bare Go"]["added p50"] == pytest.approx(4.0)
    assert ratios["ours ÷ MAP"]["goal (p50)"] == "≤ 2"


def test_the_breakdown_splits_the_process_cpu_into_handler_parts_and_the_rest() -> None:
    def run(cpu_us: float, **parts_us: float) -> dict[str, Any]:
        parts = dict.fromkeys(("parse_review", "admit", "access line", "metrics", "handler"), 0)
        parts.update({k.replace("_line", " line"): int(v * 1e3) for k, v in parts_us.items()})
        return {
            "requests": 10,
            "cpu_ns": cpu_us * 1e4,
            "parts_ns": {k: v * 10 for k, v in parts.items()},
            "gc_passes": [20, 1, 0],
            "gc_ns": 50_000,
            "gc_ns_by_gen": [40_000, 10_000, 0],
            "peak_bytes": 2048,
            "peak_mean": 1024,
            "blocks": 0,
            "load": 3.0,
        }

    split = run(1000, handler=600, parse_review=40, admit=450, access_line=30, metrics=10)
    runs = {(o, k): [run(900), split, split] for o in ("before", "after") for k in _KINDS}
    rows = {
        r["per request (medians of runs)"]: r["freeze after fill"] for r in breakdown_table(runs)
    }
    assert (
        rows["outside the handler: TLS, HTTP parsing, event loop, aiohttp's write, CPU µs"]
        == "400.0"
    )
    assert rows["  the rest (answer to JSON, web.Response), CPU µs"] == "70.0"
    assert rows["gc gen0 passes per 1,000 requests"] == "2000.0"
    assert rows["CPU µs per gen2 pass (all runs)"] == "none"
