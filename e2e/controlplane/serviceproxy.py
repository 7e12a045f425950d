"""What kube-proxy and the pod network's egress do here: Service ClusterIPs that lead to Ready
pods, and nothing that leaves 127.0.0.0/8.

Nothing routes a ClusterIP on this host, and an EndpointSlice may not hold a loopback pod IP
(127.2.x.y), so the API server's own endpoint routing cannot be used. Instead its egress to the
cluster (webhook calls among them) goes through this HTTP CONNECT proxy on a unix socket
(kube-apiserver --egress-selector-config-file). A CONNECT to a Service's ClusterIP and port is
joined to a Ready pod that the Service selects, at the container port its targetPort names, as
kube-proxy would pick one; a CONNECT to a loopback address is joined as it is; anything else is
refused, so nothing here ever dials outside 127.0.0.0/8. A Service's DNS name
(`<name>.<namespace>.svc[.cluster.local]`, what cluster DNS would resolve) is joined the same
way: the host processes that stand in for pods (the second kube-scheduler calling the
webhook's extender) use it as they would in a cluster.

The same proxy listens on a loopback TCP port for the containers the e2e runtime runs: their
HTTP(S)_PROXY. A container that reaches for the internet (an example policy's s3:// source on
AWS) is refused there, with the reason, instead of dialling out.

    python -m e2e.controlplane.serviceproxy --kubeconfig K --socket PATH --port N
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import ipaddress
import itertools
import logging
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

log = logging.getLogger("e2e.controlplane.serviceproxy")

__all__ = ["Backend", "backends_of", "main"]

_SERVICE_NAME = re.compile(
    r"(?P<name>[a-z0-9-]+)\.(?P<namespace>[a-z0-9-]+)\.svc(?:\.cluster\.local)?"
)


def _is_loopback(host: str) -> bool:
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


@dataclass(frozen=True)
class Backend:
    pod: str
    ip: str
    port: int


def _ready(pod: Any) -> bool:
    conditions = (pod.status and pod.status.conditions) or []
    return any(c.type == "Ready" and c.status == "True" for c in conditions)


def _container_port(pod: Any, target: int | str) -> int | None:
    if isinstance(target, int) or str(target).isdigit():
        return int(target)
    for container in pod.spec.containers or []:
        for port in container.ports or []:
            if port.name == target:
                return int(port.container_port)
    return None


def backends_of(service: Any, port: int, pods: list[Any]) -> list[Backend]:
    """The Ready pods behind `service`:`port`, at the container port its targetPort names."""
    spec_port = next((p for p in service.spec.ports or [] if p.port == port), None)
    if spec_port is None:
        return []
    target = spec_port.target_port if spec_port.target_port is not None else port
    out = []
    for pod in pods:
        container_port = _container_port(pod, target)
        live = pod.metadata.deletion_timestamp is None
        if live and pod.status and pod.status.pod_ip and container_port and _ready(pod):
            out.append(Backend(pod.metadata.name, pod.status.pod_ip, container_port))
    return sorted(out, key=lambda b: b.pod)


class Proxy:
    def __init__(self, core: Any) -> None:
        self.core = core
        self.turn = itertools.count()  # round robin over the Ready pods

    async def _service(self, host: str, port: int) -> Any:
        named = _SERVICE_NAME.fullmatch(host)
        if named is not None:
            services = await self.core.list_namespaced_service(
                named["namespace"], field_selector=f"metadata.name={named['name']}"
            )
            return next(iter(services.items), None)
        try:
            address = ipaddress.ip_address(host)
        except ValueError:
            raise LookupError(f"{host}:{port}: nothing outside 127.0.0.0/8 is reachable") from None
        if address.is_loopback:
            return None
        services = await self.core.list_service_for_all_namespaces()
        return next((s for s in services.items if s.spec.cluster_ip == host), None)

    async def _targets(self, host: str, port: int) -> list[tuple[str, int]]:
        if _is_loopback(host):
            return [(host, port)]
        service = await self._service(host, port)
        if service is None or not service.spec.selector:
            raise LookupError(f"{host}:{port} is no Service ClusterIP or name with a selector")
        selector = ",".join(f"{k}={v}" for k, v in sorted(service.spec.selector.items()))
        pods = await self.core.list_namespaced_pod(
            service.metadata.namespace, label_selector=selector
        )
        backends = backends_of(service, port, pods.items)
        if not backends:
            name = f"{service.metadata.namespace}/{service.metadata.name}"
            raise LookupError(f"Service {name} port {port} has no Ready pod")
        start = next(self.turn) % len(backends)
        ordered = backends[start:] + backends[:start]
        return [(b.ip, b.port) for b in ordered]

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            head = await reader.readuntil(b"\r\n\r\n")
            method, target, _ = head.split(b"\r\n", 1)[0].decode().split(" ", 2)
            if method != "CONNECT":
                raise LookupError(f"{method}: only CONNECT is proxied")
            host, _, port = target.rpartition(":")
            targets = await self._targets(host.strip("[]"), int(port))
        except (LookupError, ValueError, asyncio.IncompleteReadError) as exc:
            log.warning("refused: %s", exc)
            writer.write(f"HTTP/1.1 502 Bad Gateway\r\n\r\n{exc}".encode())
            await _close(writer)
            return
        upstream = None
        for ip, port_ in targets:
            # A pod whose process just died stays Ready until its probe fails: try the next.
            with contextlib.suppress(OSError):
                upstream = await asyncio.open_connection(ip, port_)
                log.info("CONNECT %s → %s:%d", target, ip, port_)
                break
        if upstream is None:
            writer.write(b"HTTP/1.1 503 Service Unavailable\r\n\r\n")
            await _close(writer)
            return
        writer.write(b"HTTP/1.1 200 Connection established\r\n\r\n")
        up_reader, up_writer = upstream
        await asyncio.gather(_pipe(reader, up_writer), _pipe(up_reader, writer))


async def _pipe(src: asyncio.StreamReader, dst: asyncio.StreamWriter) -> None:
    with contextlib.suppress(OSError, asyncio.IncompleteReadError):
        while chunk := await src.read(65536):
            dst.write(chunk)
            await dst.drain()
    await _close(dst)


async def _close(writer: asyncio.StreamWriter) -> None:
    with contextlib.suppress(OSError):
        writer.close()
        await writer.wait_closed()


async def run(kubeconfig: Path, socket: Path, port: int) -> None:
    from kubernetes_asyncio import client, config

    cfg = client.Configuration()
    await config.load_kube_config(config_file=str(kubeconfig), client_configuration=cfg)
    async with client.ApiClient(cfg) as api:
        proxy = Proxy(client.CoreV1Api(api))
        server = await asyncio.start_unix_server(proxy.handle, path=str(socket))
        egress = await asyncio.start_server(proxy.handle, host="127.0.0.1", port=port)
        log.info("serving HTTP CONNECT on %s and 127.0.0.1:%d", socket, port)
        async with server, egress:
            await asyncio.gather(server.serve_forever(), egress.serve_forever())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kubeconfig", type=Path, required=True)
    parser.add_argument("--socket", type=Path, required=True)
    parser.add_argument("--port", type=int, required=True, help="loopback port for containers")
    args = parser.parse_args()
    args.socket.unlink(missing_ok=True)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    asyncio.run(run(args.kubeconfig, args.socket, args.port))


if __name__ == "__main__":
    main()
