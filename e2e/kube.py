"""kubectl and the API server's endpoints, as the local cluster's scripts and tests call them."""

from __future__ import annotations

import json
import ssl
import subprocess
import urllib.request
from pathlib import Path
from typing import Any

__all__ = ["Kubectl", "get_url", "write_kubeconfig"]


class Kubectl:
    """The real kubectl with one kubeconfig: `k("get", "nodes")`, `k.json("get", "nodes")`."""

    def __init__(self, binary: Path, kubeconfig: Path) -> None:
        self.binary = binary
        self.kubeconfig = kubeconfig

    def run(
        self, *args: str, input: str | None = None, check: bool = True, timeout: float = 60
    ) -> subprocess.CompletedProcess[str]:
        done = subprocess.run(
            [str(self.binary), f"--kubeconfig={self.kubeconfig}", *args],
            input=input,
            capture_output=True,
            text=True,
            timeout=timeout,
        )
        if check and done.returncode != 0:
            raise RuntimeError(
                f"kubectl {' '.join(args)} failed ({done.returncode}): {done.stderr.strip()}"
            )
        return done

    def __call__(self, *args: str, input: str | None = None) -> str:
        return self.run(*args, input=input).stdout

    def json(self, *args: str) -> Any:
        return json.loads(self(*args, "-o", "json"))

    def apply(self, obj: dict[str, Any] | list[dict[str, Any]], *args: str) -> str:
        doc = {"apiVersion": "v1", "kind": "List", "items": obj} if isinstance(obj, list) else obj
        return self("apply", "-f", "-", *args, input=json.dumps(doc))


def write_kubeconfig(
    path: Path,
    *,
    server: str,
    ca: Path,
    user: str,
    cert: Path | None = None,
    key: Path | None = None,
    token: str | None = None,
) -> Path:
    credentials: dict[str, str] = {}
    if cert is not None and key is not None:
        credentials = {"client-certificate": str(cert), "client-key": str(key)}
    if token is not None:
        credentials = {"token": token}
    doc = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {
                "name": "topoplace-e2e",
                "cluster": {"server": server, "certificate-authority": str(ca)},
            }
        ],
        "users": [{"name": user, "user": credentials}],
        "contexts": [
            {"name": "topoplace-e2e", "context": {"cluster": "topoplace-e2e", "user": user}}
        ],
        "current-context": "topoplace-e2e",
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(doc, indent=2) + "\n")
    path.chmod(0o600)
    return path


def get_url(
    url: str,
    *,
    ca: Path | None = None,
    cert: tuple[Path, Path] | None = None,
    verify: bool = True,
    timeout: float = 5,
) -> str:
    """GET `url`; the body as text (raises on connection errors and HTTP errors)."""
    context = None
    if url.startswith("https:"):
        context = ssl.create_default_context(cafile=str(ca) if ca else None)
        if not verify:
            context.check_hostname = False
            context.verify_mode = ssl.CERT_NONE
        if cert is not None:
            context.load_cert_chain(str(cert[0]), str(cert[1]))
    with urllib.request.urlopen(url, timeout=timeout, context=context) as response:
        return response.read().decode()
