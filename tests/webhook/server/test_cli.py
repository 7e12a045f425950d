"""`python -m webhook serve` as a process: startup errors, --self-signed, SIGTERM draining."""

from __future__ import annotations

import json
import os
import signal
import socket
import ssl
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.webhook.server.conftest import admission_review, gpu_pod


def _env(repo_root: Path) -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(repo_root)}


def _serve(python: str, *args: str | Path) -> list[str]:
    """argv of `python -m webhook serve ARGS --policies DIR`; the last argument is DIR."""
    *options, policies = args
    return [python, "-m", "webhook", "serve", *map(str, options), "--policies", str(policies)]


def _read_prefixed(proc: subprocess.Popen[str], prefix: str, timeout: float = 30) -> str:
    """The value of the next stdout line starting with `prefix`, without hanging forever.

    A reader thread, not select(): serve prints its start-up lines in one burst, and lines
    already in the pipe object's buffer would never wake select() again.
    """
    assert proc.stdout is not None
    stdout = proc.stdout
    found: list[str] = []

    def scan() -> None:
        for line in stdout:
            if line.startswith(prefix):
                found.append(line[len(prefix) :].strip())
                return

    reader = threading.Thread(target=scan, daemon=True)
    reader.start()
    reader.join(timeout)
    if found:
        return found[0]
    raise AssertionError(f"serve printed no {prefix!r} line (exit status {proc.poll()})")


def _wait_for_text(path: Path, text: str, timeout: float = 10) -> None:
    deadline = time.monotonic() + timeout
    while text not in path.read_text():
        if time.monotonic() > deadline:
            raise AssertionError(f"{text!r} never appeared in {path}:\n{path.read_text()}")
        time.sleep(0.05)


@pytest.fixture
def serve_self_signed(
    python: str, repo_root: Path, policy_dir: Path, tmp_path: Path
) -> Iterator[tuple[subprocess.Popen[str], Path]]:
    log = tmp_path / "serve.log"
    with log.open("w") as stderr:
        proc = subprocess.Popen(
            _serve(python, "--self-signed", "--port", "0", "--metrics-port", "0", policy_dir),
            stdout=subprocess.PIPE,
            stderr=stderr,
            text=True,
            env=_env(repo_root),
        )
    try:
        yield proc, log
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_sigterm_finishes_the_in_flight_request_and_exits_0(
    serve_self_signed: tuple[subprocess.Popen[str], Path],
) -> None:
    proc, log = serve_self_signed
    ca = Path(_read_prefixed(proc, "ca: "))
    url = _read_prefixed(proc, "listening: ")
    assert url.startswith("https://127.0.0.1:") and url.endswith("/mutate")
    port = int(url.rsplit(":", 1)[1].split("/")[0])
    assert _read_prefixed(proc, "metrics: ").startswith("http://127.0.0.1:")

    body = json.dumps(admission_review(gpu_pod(), uid="in-flight")).encode()
    context = ssl.create_default_context(cafile=str(ca))
    with (
        socket.create_connection(("127.0.0.1", port), timeout=10) as raw,
        context.wrap_socket(raw, server_hostname="localhost") as conn,
    ):
        # Headers and half the body: the handler is running, waiting for the rest.
        conn.sendall(
            b"POST /mutate HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n"
            b"Content-Length: %d\r\n\r\n%s" % (len(body), body[:100])
        )
        time.sleep(0.3)
        proc.send_signal(signal.SIGTERM)
        _wait_for_text(log, "stopping")
        conn.sendall(body[100:])
        answer = b""
        while chunk := conn.recv(65536):  # the server closes the connection after answering
            answer += chunk
    head, _, payload = answer.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200")
    assert json.loads(payload)["response"]["uid"] == "in-flight"
    assert proc.wait(timeout=15) == 0
    assert not ca.exists(), "the throwaway CA directory is removed on exit"
    assert "uid=in-flight" in log.read_text()


def test_invalid_policies_exit_non_zero_with_every_message(
    python: str, repo_root: Path, tmp_path: Path
) -> None:
    policies = tmp_path / "policies"
    policies.mkdir()
    (policies / "bad.yaml").write_text(
        "apiVersion: topoplace.io/v1alpha1\nkind: PlacementPolicy\nmetadata: {name: x}\n"
        "spec:\n  resources: {cpuPerGpu: -1}\n  placement: {gpuNicLink: FAST}\n"
    )
    result = subprocess.run(
        _serve(python, "--self-signed", "--port", "0", "--metrics-port", "-1", policies),
        capture_output=True,
        text=True,
        env=_env(repo_root),
        timeout=60,
    )
    assert result.returncode == 1
    assert "is invalid" in result.stderr
    assert "spec.resources.cpuPerGpu" in result.stderr
    assert "spec.placement.gpuNicLink" in result.stderr
    assert "listening:" not in result.stdout


def test_missing_tls_flags_is_a_usage_error(python: str, repo_root: Path, tmp_path: Path) -> None:
    result = subprocess.run(
        _serve(python, tmp_path),
        capture_output=True,
        text=True,
        env=_env(repo_root),
        timeout=60,
    )
    assert result.returncode == 2
    assert "--tls-cert FILE and --tls-key FILE, or --self-signed" in result.stderr


def test_unloadable_key_pair_is_named(python: str, repo_root: Path, policy_dir: Path) -> None:
    cert = policy_dir.parent / "tls.crt"
    cert.write_text("not a certificate")
    result = subprocess.run(
        _serve(python, "--tls-cert", cert, "--tls-key", cert, "--port", "0", policy_dir),
        capture_output=True,
        text=True,
        env=_env(repo_root),
        timeout=60,
    )
    assert result.returncode == 1
    assert "cannot load the TLS key pair" in result.stderr and str(cert) in result.stderr


@pytest.mark.slow  # `make demo` runs it too; a full extra server start
def test_demo_round_trip_script(python: str, repo_root: Path) -> None:
    """examples/demo_serve.py (run by `make demo`) against the example policies and pods."""
    result = subprocess.run(
        [python, str(repo_root / "examples" / "demo_serve.py")],
        capture_output=True,
        text=True,
        env=_env(repo_root),
        timeout=60,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "HTTP 200 application/json" in result.stdout
    assert '"patchType": "JSONPatch"' in result.stdout
    assert "server exited 0" in result.stdout
