"""The servers the webhook benches run, and how they are asked: `serve` as the deployment runs
it, the bare aiohttp floors (benchmarks/peers/bare_server.py: a constant allow, or a webhook
that parses each review and answers with a fixed patch), wrk's load against any of them."""

from __future__ import annotations

import base64
import json
import os
import ssl
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

from benchmarks.procs import Server, cpu_seconds, start_server
from webhook.certs.keys import make_ca, make_serving_cert, write_pair

__all__ = [
    "ask",
    "await_fit_verdict",
    "check_answer",
    "measure",
    "patch_bytes",
    "start_bare",
    "start_ours",
    "write_serving_pair",
]

_LUA = Path(__file__).with_name("loadgen.lua")


def write_serving_pair(work: Path) -> tuple[Path, Path, Path]:
    """A fresh CA and a serving pair for localhost in `work`: (ca.crt, tls.crt, tls.key)."""
    ca = make_ca()
    pair = make_serving_cert(ca, ["localhost"], ip_addresses=["127.0.0.1"])
    ca_path, cert, key = work / "ca.crt", work / "tls.crt", work / "tls.key"
    ca_path.write_bytes(ca.cert_pem)
    write_pair(pair, cert, key)
    return ca_path, cert, key


def start_ours(work: Path, tls: list[str], env: dict[str, str], *, api_kubeconfig: Path) -> Server:
    """`topoplace-webhook serve` with its node and template caches, fed by the API stub."""
    policies = work / "policies"
    return start_server(
        "topoplace",
        [
            sys.executable,
            "-m",
            "webhook",
            "serve",
            "--policies",
            str(policies),
            *tls,
            "--host",
            "127.0.0.1",
            "--port",
            "0",
            "--metrics-port",
            "0",
            "--node-cache",
            "--claim-template-cache",
            "--kubeconfig",
            str(api_kubeconfig),
            "--log-format",
            "json",
        ],
        log=work / "serve.log",
        env=env,
    )


def start_bare(
    work: Path, tls: list[str], env: dict[str, str], *, patch_of: bytes | None = None
) -> Server:
    """The bare aiohttp TLS server: a constant allow, or (`patch_of`, a review whose answer
    from `serve` it copies) the bare webhook: it parses each review with orjson and answers
    with that answer's patch, fixed."""
    argv = [sys.executable, "-m", "benchmarks.peers.bare_server", *tls]
    name = "bare"
    if patch_of is not None:
        patch = work / "bare-patch.json"
        patch.write_bytes(patch_of)
        argv += ["--patch-file", str(patch)]
        name = "bare-webhook"
    return start_server(name, argv, log=work / f"{name}.log", env=env)


def patch_bytes(answered: dict[str, Any]) -> bytes:
    """The JSON patch of an AdmissionResponse, as bytes."""
    return base64.b64decode(answered["patch"])


def measure(server: Server, body: Path, *, connections: int, seconds: float) -> dict[str, float]:
    """One wrk run: req/s, p50 and p99 ms, the server's CPU µs per request."""
    before = cpu_seconds(server.process.pid)
    result = _wrk(server.url, body, connections=connections, seconds=seconds)
    cpu = cpu_seconds(server.process.pid) - before
    requests = result["requests"]
    if result["non2xx"] or result["socket_errors"] or not requests:
        raise RuntimeError(f"{server.name}: errors or no answer under load: {result}")
    return {
        "rps": requests / (result["duration_us"] / 1e6),
        "p50_ms": result["p50_us"] / 1000,
        "p99_ms": result["p99_us"] / 1000,
        "cpu_us": cpu / requests * 1e6,
    }


def _wrk(url: str, body: Path, *, connections: int, seconds: float) -> dict[str, Any]:
    out = subprocess.run(
        [
            "wrk",
            "-t1",
            f"-c{connections}",
            # wrk parses whole seconds only: "-d2.0s" is a usage error.
            f"-d{max(1, round(seconds))}s",
            "--timeout",
            "5s",
            "-s",
            str(_LUA),
            url,
        ],
        env={**os.environ, "BODY_FILE": str(body)},
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return json.loads(out.strip().splitlines()[-1])


def ask(server: Server, body: bytes, ca: Path) -> dict[str, Any]:
    ctx = ssl.create_default_context(cafile=str(ca))
    req = urllib.request.Request(
        server.url, data=body, headers={"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(req, context=ctx, timeout=10) as resp:
        answer: dict[str, Any] = json.loads(resp.read())["response"]
    return answer


def check_answer(server: Server, body: bytes, ca: Path, *, expect_patch: bool) -> None:
    answer = ask(server, body, ca)
    if answer.get("allowed") is not True or ("patch" in answer) != expect_patch:
        raise RuntimeError(f"{server.name} answered unexpectedly: {answer}")


def await_fit_verdict(server: Server, body: bytes, ca: Path, *, timeout: float = 60) -> None:
    """Wait until the node cache has listed the stand-in's nodes: the fit check's warning
    (the example fleet guarantees no GPU↔NIC pairs) is in the answer."""
    deadline = time.monotonic() + timeout
    while True:
        answer = ask(server, body, ca)
        if any("GPU↔NIC pairs" in w for w in answer.get("warnings", [])):
            return
        if time.monotonic() > deadline:
            raise RuntimeError(f"{server.name}: no fit verdict within {timeout:.0f} s: {answer}")
        time.sleep(0.2)
