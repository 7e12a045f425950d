"""Regenerate agent/sources/podresources_pb from its api.proto with grpcio-tools.

`python -m tests.agent.audit.stubs [UPSTREAM_API_PROTO]` copies the upstream file (default: the
Go module cache's k8s.io/kubelet copy, when given or found) with any gogoproto import and
options stripped, then runs protoc. test_stubs.py checks the committed files are in step.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

__all__ = ["PACKAGE", "REPO", "descriptor_from_proto", "go_module_proto", "strip_gogo"]

REPO = Path(__file__).resolve().parents[3]
PACKAGE = "agent/sources/podresources_pb"
_GO_PROTO = "k8s.io/kubelet@*/pkg/apis/podresources/v1/api.proto"

_GOGO_IMPORT = re.compile(r'^import\s+"github\.com/gogo/protobuf/gogoproto/gogo\.proto";\n', re.M)
_GOGO_FILE_OPTION = re.compile(r"^option\s+\(gogoproto\.[^)]*\)\s*=\s*[^;]*;\n", re.M)
_GOGO_FIELD_OPTIONS = re.compile(r"\s*\[\s*\(gogoproto\.[^\]]*\]")


def strip_gogo(text: str) -> str:
    """api.proto without gogoproto (older kubelet releases carry it; protoc lacks gogo.proto)."""
    return _GOGO_FIELD_OPTIONS.sub("", _GOGO_FILE_OPTION.sub("", _GOGO_IMPORT.sub("", text)))


def go_module_proto() -> Path | None:
    """The newest k8s.io/kubelet api.proto in the Go module cache, if there is one."""
    for cache in (Path.home() / "go/pkg/mod", Path("/root/go/pkg/mod")):
        found = sorted(cache.glob(_GO_PROTO)) if cache.is_dir() else []
        if found:
            return found[-1]
    return None


def _protoc(args: list[str], cwd: Path) -> None:
    subprocess.run([sys.executable, "-m", "grpc_tools.protoc", "-I.", *args],
                   cwd=cwd, check=True, capture_output=True, timeout=60)  # fmt: skip


def descriptor_from_proto(proto_text: str) -> bytes:
    """The FileDescriptorProto protoc makes of `proto_text` at the package's path."""
    from google.protobuf import descriptor_pb2

    with tempfile.TemporaryDirectory() as tmp:
        where = Path(tmp) / PACKAGE
        where.mkdir(parents=True)
        (where / "api.proto").write_text(proto_text)
        _protoc([f"--descriptor_set_out={tmp}/set.pb", f"{PACKAGE}/api.proto"], Path(tmp))
        files = descriptor_pb2.FileDescriptorSet.FromString((Path(tmp) / "set.pb").read_bytes())
        (only,) = files.file
        # protoc's descriptor sets fill json_name; the Python gencode embeds the file without.
        for message in _messages(only.message_type):
            for f in message.field:
                f.ClearField("json_name")
        return only.SerializeToString()


def _messages(messages: Iterable[Any]) -> Iterator[Any]:
    for m in messages:
        yield m
        yield from _messages(m.nested_type)


def regenerate(upstream: Path | None) -> None:
    target = REPO / PACKAGE / "api.proto"
    if upstream is not None:
        target.write_text(strip_gogo(upstream.read_text()))
    with tempfile.TemporaryDirectory() as tmp:
        where = Path(tmp) / PACKAGE
        where.mkdir(parents=True)
        shutil.copy(target, where / "api.proto")
        out = ["--python_out=.", "--pyi_out=.", "--grpc_python_out=."]
        _protoc([*out, f"{PACKAGE}/api.proto"], Path(tmp))
        for name in ("api_pb2.py", "api_pb2.pyi", "api_pb2_grpc.py"):
            shutil.copy(where / name, REPO / PACKAGE / name)


if __name__ == "__main__":
    regenerate(Path(sys.argv[1]) if len(sys.argv) > 1 else go_module_proto())
