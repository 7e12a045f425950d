"""A stand-in for the kubelet's PodResources endpoint that speaks the real protocol.

A grpcio server on a unix socket registering `v1.PodResourcesLister` with the messages
generated from the published api.proto, so the client under test sends and receives exactly
what it would with a kubelet. The answer to `GetAllocatableResources` is set by `offer`, the
answer to `List` by the test: messages built with
`pod`/`container`/`devices`, or raw bytes (a malformed answer). `stop()` removes the socket,
as a kubelet going away does.
"""

from __future__ import annotations

import os
import tempfile
import threading
from collections.abc import Iterable, Iterator, Sequence
from concurrent import futures
from contextlib import contextmanager
from pathlib import Path

import grpc

from agent.sources.podresources_pb import api_pb2

__all__ = ["FakeKubelet", "container", "devices", "memory", "pod", "short_socket_dir"]


def devices(
    resource: str, ids: Sequence[str], numa: Iterable[int] = ()
) -> api_pb2.ContainerDevices:
    nodes = [api_pb2.NUMANode(ID=n) for n in numa]
    topology = api_pb2.TopologyInfo(nodes=nodes) if nodes else None
    return api_pb2.ContainerDevices(resource_name=resource, device_ids=list(ids), topology=topology)


def memory(kind: str, size: int, numa: Iterable[int]) -> api_pb2.ContainerMemory:
    topology = api_pb2.TopologyInfo(nodes=[api_pb2.NUMANode(ID=n) for n in numa])
    return api_pb2.ContainerMemory(memory_type=kind, size=size, topology=topology)


def container(
    name: str,
    *device_list: api_pb2.ContainerDevices,
    cpus: Iterable[int] = (),
    mem: Iterable[api_pb2.ContainerMemory] = (),
    claims: Iterable[tuple[str, str, str, Sequence[str]]] = (),
) -> api_pb2.ContainerResources:
    """`claims`: (claim name, DRA driver, device name, CDI device names)."""
    dynamic = [
        api_pb2.DynamicResource(
            claim_name=claim,
            claim_namespace="ml",
            claim_resources=[
                api_pb2.ClaimResource(
                    driver_name=driver,
                    pool_name="node",
                    device_name=device,
                    cdi_devices=[api_pb2.CDIDevice(name=n) for n in cdi],
                )
            ],
        )
        for claim, driver, device, cdi in claims
    ]
    return api_pb2.ContainerResources(
        name=name,
        devices=list(device_list),
        cpu_ids=list(cpus),
        memory=list(mem),
        dynamic_resources=dynamic,
    )


def pod(
    namespace: str, name: str, *containers: api_pb2.ContainerResources, cpus: Iterable[int] = ()
) -> api_pb2.PodResources:
    return api_pb2.PodResources(
        namespace=namespace, name=name, containers=list(containers), cpu_ids=list(cpus)
    )


class FakeKubelet:
    SERVICE = "v1.PodResourcesLister"

    def __init__(self, socket: Path) -> None:
        self.socket = socket
        self._lock = threading.Lock()
        self._answer: bytes = api_pb2.ListPodResourcesResponse().SerializeToString()
        self._allocatable = api_pb2.AllocatableResourcesResponse()
        self.calls = 0
        self._server: grpc.Server | None = None

    def serve(self, *pods: api_pb2.PodResources) -> None:
        self.serve_raw(
            api_pb2.ListPodResourcesResponse(pod_resources=list(pods)).SerializeToString()
        )

    def serve_raw(self, answer: bytes) -> None:
        with self._lock:
            self._answer = answer

    def offer(
        self,
        *device_list: api_pb2.ContainerDevices,
        cpus: Iterable[int] = (),
        mem: Iterable[api_pb2.ContainerMemory] = (),
    ) -> None:
        """What GetAllocatableResources answers: the devices the node's plugins offer, the
        CPU manager's allocatable CPUs and the memory manager's blocks."""
        with self._lock:
            self._allocatable = api_pb2.AllocatableResourcesResponse(
                devices=list(device_list), cpu_ids=list(cpus), memory=list(mem)
            )

    def _offered(
        self, request: api_pb2.AllocatableResourcesRequest, context: grpc.ServicerContext
    ) -> api_pb2.AllocatableResourcesResponse:
        with self._lock:
            return self._allocatable

    def _list(
        self, request: api_pb2.ListPodResourcesRequest, context: grpc.ServicerContext
    ) -> bytes:
        with self._lock:
            self.calls += 1
            return self._answer

    def start(self) -> FakeKubelet:
        server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
        handler = grpc.method_handlers_generic_handler(
            self.SERVICE,
            {
                "List": grpc.unary_unary_rpc_method_handler(
                    self._list,
                    request_deserializer=api_pb2.ListPodResourcesRequest.FromString,
                    response_serializer=lambda answer: answer,  # bytes as set: may be broken
                ),
                "GetAllocatableResources": grpc.unary_unary_rpc_method_handler(
                    self._offered,
                    request_deserializer=api_pb2.AllocatableResourcesRequest.FromString,
                    response_serializer=api_pb2.AllocatableResourcesResponse.SerializeToString,
                ),
            },
        )
        server.add_generic_rpc_handlers((handler,))
        server.add_insecure_port(f"unix:{self.socket}")
        server.start()
        self._server = server
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.stop(grace=None).wait(5)
            self._server = None
        self.socket.unlink(missing_ok=True)


@contextmanager
def short_socket_dir(tmp_path: Path) -> Iterator[Path]:
    """tmp_path, unless it is too long for a unix socket path (108 bytes): then a short one."""
    if len(str(tmp_path / "kubelet.sock")) < 100:
        yield tmp_path
        return
    path = Path(tempfile.mkdtemp(prefix="pr-"))
    try:
        yield path
    finally:
        for child in path.iterdir():
            child.unlink()
        os.rmdir(path)
