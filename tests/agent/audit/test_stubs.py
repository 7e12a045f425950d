"""The committed PodResources stubs are in step with the published api.proto."""

from __future__ import annotations

import pytest

from agent.sources.podresources_pb import api_pb2
from tests.agent.audit.stubs import (
    PACKAGE,
    REPO,
    descriptor_from_proto,
    go_module_proto,
    strip_gogo,
)

pytest.importorskip("grpc_tools", reason="grpcio-tools (the test extra) regenerates the stubs")


def test_committed_descriptor_is_what_protoc_makes_of_api_proto() -> None:
    proto = (REPO / PACKAGE / "api.proto").read_text()
    assert api_pb2.DESCRIPTOR.serialized_pb == descriptor_from_proto(proto), (
        "stale stubs: run `python -m tests.agent.audit.stubs`"
    )


def test_api_proto_is_the_kubelet_modules_copy() -> None:
    upstream = go_module_proto()
    if upstream is None:
        pytest.skip("no k8s.io/kubelet module in the Go module cache to compare with")
    assert (REPO / PACKAGE / "api.proto").read_text() == strip_gogo(upstream.read_text())


def test_gogoproto_is_stripped_as_older_releases_need() -> None:
    old = (
        'syntax = "proto3";\npackage v1;\n'
        'import "github.com/gogo/protobuf/gogoproto/gogo.proto";\n'
        "option (gogoproto.goproto_stringer_all) = false;\n"
        "option (gogoproto.stringer_all) =  true;\n"
        'message NUMANode {\n    int64 ID = 1 [(gogoproto.customname) = "ID"];\n}\n'
    )
    stripped = strip_gogo(old)
    assert "gogo" not in stripped
    assert "int64 ID = 1;" in stripped
    descriptor_from_proto(stripped)  # protoc accepts it
