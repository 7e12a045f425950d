"""Key-pair rotation without dropping connections, and 200 concurrent admissions."""

from __future__ import annotations

import asyncio
import json
import re
import ssl
from asyncio import sslproto
from pathlib import Path
from typing import Any

import aiohttp
import jsonpatch
import trustme

from tests.kube import assert_valid
from tests.webhook.server.conftest import (
    TlsFiles,
    admission_review,
    decode_patch,
    gpu_pod,
    post_review,
    server_config,
    wait_until,
    write_leaf,
)
from webhook.server.runner import WebhookServer
from webhook.server.tls import TLS_READ_BUFFER_BYTES, limit_tls_read_buffers

Stream = tuple[asyncio.StreamReader, asyncio.StreamWriter]


async def _connect(server: WebhookServer, tls: TlsFiles) -> Stream:
    return await asyncio.open_connection(
        "127.0.0.1", server.port, ssl=tls.client_context(), server_hostname="localhost"
    )


def _served_cert(stream: Stream) -> bytes:
    return stream[1].get_extra_info("ssl_object").getpeercert(binary_form=True)


def _der(leaf: trustme.LeafCert) -> bytes:
    return ssl.PEM_cert_to_DER_cert(leaf.cert_chain_pems[0].bytes().decode())


async def _post_on(stream: Stream, body: bytes) -> int:
    """One HTTP/1.1 keep-alive request on an already open connection; the status code."""
    reader, writer = stream
    writer.write(
        b"POST /mutate HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n"
        b"Content-Length: %d\r\n\r\n%s" % (len(body), body)
    )
    await writer.drain()
    head = await reader.readuntil(b"\r\n\r\n")
    match = re.search(rb"(?i)\r\ncontent-length: *(\d+)", head)
    assert match is not None, head
    await reader.readexactly(int(match.group(1)))
    return int(head.split()[1])


async def _tls_reloads(client: aiohttp.ClientSession, server: WebhookServer) -> dict[str, float]:
    async with client.get(f"http://127.0.0.1:{server.metrics_port}/metrics") as resp:
        text = await resp.text()
    return {
        m.group(1): float(m.group(2))
        for m in re.finditer(r'tls_reloads_total\{result="(\w+)"\} (\S+)', text)
    }


async def test_rotated_key_pair_is_served_to_new_connections_only(
    server: WebhookServer, tls_files: TlsFiles, client: aiohttp.ClientSession
) -> None:
    body = json.dumps(admission_review(gpu_pod())).encode()
    old = await _connect(server, tls_files)
    first_cert = _served_cert(old)
    assert await _post_on(old, body) == 200

    rotated = tls_files.ca.issue_cert("localhost", "127.0.0.1", "webhook.topoplace.svc")
    write_leaf(rotated, tls_files.cert, tls_files.key)

    async def new_cert_served() -> bool:
        fresh = await _connect(server, tls_files)
        served = _served_cert(fresh)
        fresh[1].close()
        return served == _der(rotated)

    await wait_until(new_cert_served, "the rotated certificate on a new connection")
    # The connection opened before the rotation is still up, on its original certificate.
    assert await _post_on(old, body) == 200
    assert _served_cert(old) == first_cert != _der(rotated)
    old[1].close()
    assert (await _tls_reloads(client, server)).get("ok") == 1


async def test_half_rotated_pair_keeps_old_one_until_the_key_arrives(
    server: WebhookServer, tls_files: TlsFiles, client: aiohttp.ClientSession
) -> None:
    before = _served_cert(stream := await _connect(server, tls_files))
    stream[1].close()
    rotated = tls_files.ca.issue_cert("localhost", "127.0.0.1")
    # A careless rotator writes the certificate first: it does not match the old key.
    tls_files.cert.write_bytes(b"".join(b.bytes() for b in rotated.cert_chain_pems))

    async def refused() -> bool:
        return (await _tls_reloads(client, server)).get("error", 0) >= 1

    await wait_until(refused, "the mismatched pair to be refused")
    stream = await _connect(server, tls_files)
    assert _served_cert(stream) == before
    assert await _post_on(stream, json.dumps(admission_review(gpu_pod())).encode()) == 200
    stream[1].close()
    assert (await _tls_reloads(client, server))["error"] == 1  # reported once, not every tick

    rotated.private_key_pem.write_to_path(str(tls_files.key))

    async def new_cert_served() -> bool:
        fresh = await _connect(server, tls_files)
        served = _served_cert(fresh)
        fresh[1].close()
        return served == _der(rotated)

    await wait_until(new_cert_served, "the completed pair to be served")


async def test_200_concurrent_admissions_each_get_their_own_answer(
    server: WebhookServer, client: aiohttp.ClientSession
) -> None:
    reviews = [
        admission_review(gpu_pod(gpus=1 + i % 8), uid=f"req-{i:03d}", namespace="ml-team")
        for i in range(200)
    ]
    answers = await asyncio.gather(*(post_review(client, server.url, r) for r in reviews))
    validated: set[int] = set()
    for review, (status, answer) in zip(reviews, answers, strict=True):
        assert status == 200
        response = answer["response"]
        assert response["uid"] == review["request"]["uid"] and response["allowed"] is True
        pod = jsonpatch.apply_patch(review["request"]["object"], decode_patch(response))
        gpus = int(
            review["request"]["object"]["spec"]["containers"][0]["resources"]["limits"][
                "nvidia.com/gpu"
            ]
        )
        assert pod["spec"]["containers"][0]["resources"]["limits"]["cpu"] == str(4 * gpus)
        if gpus not in validated:  # schema validation is slow; once per distinct shape
            assert_valid(pod)
            validated.add(gpus)


async def test_small_tls_read_buffer_still_takes_large_pods(
    policy_dir: Path, tls_files: TlsFiles, client: aiohttp.ClientSession, monkeypatch: Any
) -> None:
    # serve shrinks asyncio's per-connection TLS read buffer (256 KiB by default) to save
    # memory; a pod body several times that buffer must still arrive whole.
    monkeypatch.setattr(sslproto.SSLProtocol, "max_size", 256 * 1024)
    limit_tls_read_buffers()
    assert sslproto.SSLProtocol.max_size == TLS_READ_BUFFER_BYTES < 256 * 1024
    async with WebhookServer(server_config(policy_dir, tls_files)) as server:
        pod = gpu_pod()
        pod["metadata"]["annotations"] = {"big": "x" * (8 * TLS_READ_BUFFER_BYTES)}
        review = admission_review(pod)
        status, answer = await post_review(client, server.url, review)
    assert status == 200
    patched = jsonpatch.apply_patch(review["request"]["object"], decode_patch(answer["response"]))
    assert patched["metadata"]["annotations"]["big"] == "x" * (8 * TLS_READ_BUFFER_BYTES)
    assert patched["spec"]["affinity"]["nodeAffinity"]
