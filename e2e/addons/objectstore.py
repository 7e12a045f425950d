"""The cluster's object store: an S3-compatible server (moto) on 127.0.0.1, holding a small
stand-in for every s3:// dataset the shipped policies name, so that their prefetch init
containers, which the e2e runtime runs for real, fetch from here and never from the internet.

    python -m e2e.addons.objectstore --port N --policies DIR --ready FILE

The e2e runtime points our containers at it (AWS_ENDPOINT_URL_S3 and keys); a policy's
`sourceSecret` still overrides that, as in production.
"""

from __future__ import annotations

import argparse
import logging
import sys
import threading
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import yaml

from e2e import procs

__all__ = ["CREDENTIALS", "client", "pod_env", "sources", "start"]

log = logging.getLogger("e2e.addons.objectstore")

# moto accepts any keys; these make the clients sign their requests as AWS's would.
CREDENTIALS = {
    "AWS_ACCESS_KEY_ID": "e2e",
    "AWS_SECRET_ACCESS_KEY": "e2e-secret",
    "AWS_REGION": "us-east-1",
}
FILES = {"part-0000.bin": b"\x00" * 4096, "part-0001.bin": b"\x01" * 4096}


def sources(policies: Path) -> list[tuple[str, str]]:
    """(bucket, prefix) of every s3:// dataset source in the policy files."""
    out = []
    for path in sorted(policies.glob("*.yaml")):
        for doc in yaml.safe_load_all(path.read_text()):
            for dataset in ((doc or {}).get("spec") or {}).get("datasets") or []:
                url = urlparse(str(dataset.get("source", "")))
                if url.scheme == "s3":
                    out.append((url.netloc, url.path.lstrip("/")))
    return out


def client(
    endpoint: str,
    *,
    key: str = CREDENTIALS["AWS_ACCESS_KEY_ID"],
    secret: str = CREDENTIALS["AWS_SECRET_ACCESS_KEY"],
    region: str = CREDENTIALS["AWS_REGION"],
) -> Any:
    """A boto3 S3 client for an S3-compatible server on loopback."""
    import boto3

    return boto3.client(
        "s3",
        endpoint_url=endpoint,
        aws_access_key_id=key,
        aws_secret_access_key=secret,
        region_name=region,
    )


def pod_env(endpoint: str) -> dict[str, str]:
    return {"AWS_ENDPOINT_URL_S3": endpoint, "AWS_ALLOW_HTTP": "true", **CREDENTIALS}


def start(state: Path, policies: Path) -> str:
    """Start the store as a cluster process; its endpoint once it holds the datasets."""
    port = procs.free_port()
    ready = state / "object-store.ready"
    procs.start(
        state,
        "object-store",
        [
            sys.executable,
            "-m",
            "e2e.addons.objectstore",
            f"--port={port}",
            f"--policies={policies}",
            f"--ready={ready}",
        ],
    )
    endpoint = f"http://127.0.0.1:{port}"
    procs.wait_for(
        lambda: ready.exists() and ready.read_text() == endpoint,
        "the object store serving the policies' datasets",
        timeout=60,
        watch=lambda: procs.check_alive(state, "object-store"),
    )
    return endpoint


def _serve(port: int, policies: Path, ready: Path) -> None:
    from moto.server import ThreadedMotoServer

    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    endpoint = f"http://127.0.0.1:{port}"
    s3 = client(endpoint)
    buckets: set[str] = set()
    for bucket, prefix in sources(policies):
        if bucket not in buckets:
            s3.create_bucket(Bucket=bucket)
            buckets.add(bucket)
        for name, data in FILES.items():
            s3.put_object(Bucket=bucket, Key=f"{prefix}{name}", Body=data)
        log.info("s3://%s/%s: %d stand-in objects", bucket, prefix, len(FILES))
    ready.write_text(endpoint)
    threading.Event().wait()  # until the cluster stops this process


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--policies", type=Path, required=True)
    parser.add_argument("--ready", type=Path, required=True, help="written with the endpoint")
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    _serve(args.port, args.policies, args.ready)


if __name__ == "__main__":
    main()
