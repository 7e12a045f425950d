"""Dataset prefetch throughput next to a plain sequential copy of the same data.

Two datasets (many small files, a few large ones) from two sources: `file://` and a local S3
server (moto, in its own process so it does not share the client's GIL). The prefetch runs
in-process (`agent.cache.prefetch.prefetch`, no process start) with its default files in flight
and does everything the init container does: listing, ETag/MD5 checks, a filesystem flush (syncfs),
rename, marker. The baseline is what a script would do: list, then `shutil.copyfile` per
file or one boto3 `get_object` after another, with no flush; for file:// a copy that fsyncs
each file shows what per-file durability costs. "× copy" is plain-copy seconds / the row's
seconds (above 1: faster than the plain copy). Figures are medians over `runs` runs. On
loopback the moto server spends milliseconds of CPU per request and there is no network
latency to hide, so for small objects the server sets the pace, not the client.

Run alone: `python -m benchmarks.agent.bench_prefetch`.
"""

from __future__ import annotations

import multiprocessing
import os
import shutil
import statistics
import tempfile
import time
from collections.abc import Callable
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

from agent.cache.prefetch import PrefetchRequest, prefetch

_LABEL = f"prefetch ({PrefetchRequest.__dataclass_fields__['parallel'].default} in flight)"

__all__ = ["run_prefetch_bench"]

_CREDS = {
    "AWS_ACCESS_KEY_ID": "bench",
    "AWS_SECRET_ACCESS_KEY": "bench",
    "AWS_DEFAULT_REGION": "us-east-1",
}
DATASETS: dict[str, tuple[int, int]] = {  # name -> (files, bytes per file)
    "2000 × 4 KiB": (2000, 4 * 1024),
    "4 × 32 MiB": (4, 32 * 1024 * 1024),
}


def _serve_s3(conn: Connection) -> None:
    import logging

    from moto.server import ThreadedMotoServer

    logging.getLogger("werkzeug").setLevel(logging.WARNING)  # no line per request
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    conn.send(server.get_host_and_port()[1])
    conn.recv()  # any message: stop
    server.stop()


def _write_dataset(root: Path, files: int, size: int) -> dict[str, bytes]:
    blob = os.urandom(size)
    out: dict[str, bytes] = {}
    for i in range(files):
        rel = f"part-{i // 100:03d}/file-{i:05d}.bin"
        # distinct content per file (cheap): the index in the first bytes
        data = i.to_bytes(8, "big") + blob[8:]
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_bytes(data)
        out[rel] = data
    return out


def _median_seconds(fn: Callable[[Path], None], runs: int, scratch: Path) -> float:
    times: list[float] = []
    for i in range(runs):
        dest = scratch / f"run-{time.monotonic_ns()}-{i}"
        dest.mkdir()
        start = time.perf_counter()
        fn(dest)
        times.append(time.perf_counter() - start)
        shutil.rmtree(dest)
    return statistics.median(times)


def _copy_tree(src: Path, dest: Path, *, fsync: bool = False) -> None:
    files = [p.relative_to(src) for p in src.rglob("*") if p.is_file()]  # list, as cp -r does
    for rel in files:
        (dest / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(src / rel, dest / rel)
        if fsync:
            fd = os.open(dest / rel, os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)


def _rows(
    source: str, name: str, files: int, size: int, copy_s: float, timed: list[tuple[str, float]]
) -> list[dict[str, Any]]:
    """One row per method; `timed` lists (method, seconds), the plain copy among them."""
    total = files * size
    rows = []
    for method, seconds in timed:
        rows.append(
            {
                "source": source,
                "dataset": name,
                "method": method,
                "files": files,
                "bytes": total,
                "seconds": seconds,
                "MB/s": total / seconds / 1e6,
                "× copy": copy_s / seconds,
            }
        )
    return rows


def _bench_file(scratch: Path, runs: int) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    for name, (files, size) in DATASETS.items():
        src = scratch / f"src-{files}"
        _write_dataset(src, files, size)

        def fetch(dest: Path, src: Path = src) -> None:
            prefetch(PrefetchRequest("bench", "v1", src.as_uri(), cache_root=dest))

        prefetch_s = _median_seconds(fetch, runs, scratch)
        copy_s = _median_seconds(lambda d, s=src: _copy_tree(s, d), runs, scratch)
        synced_s = _median_seconds(lambda d, s=src: _copy_tree(s, d, fsync=True), runs, scratch)
        timed = [
            (_LABEL, prefetch_s),
            ("shutil.copyfile loop", copy_s),
            ("shutil.copyfile + fsync loop", synced_s),
        ]
        rows += _rows("file://", name, files, size, copy_s, timed)
    return rows


def _bench_s3(scratch: Path, runs: int) -> list[dict[str, Any]]:
    import boto3

    parent, child = multiprocessing.get_context("spawn").Pipe()
    server = multiprocessing.get_context("spawn").Process(target=_serve_s3, args=(child,))
    server.start()
    endpoint = f"http://127.0.0.1:{parent.recv()}"
    saved = {k: os.environ.get(k) for k in _CREDS}
    os.environ.update(_CREDS)
    rows: list[dict[str, Any]] = []
    try:
        client = boto3.client("s3", endpoint_url=endpoint)
        client.create_bucket(Bucket="bench")
        for name, (files, size) in DATASETS.items():
            prefix = f"d{files}/"
            local = scratch / f"s3src-{files}"
            data = _write_dataset(local, files, size)
            for rel, body in data.items():
                client.put_object(Bucket="bench", Key=prefix + rel, Body=body)
            shutil.rmtree(local)
            source = f"s3://bench/{prefix}"

            def fetch(dest: Path, source: str = source) -> None:
                request = PrefetchRequest(
                    "bench", "v1", source, cache_root=dest, s3_endpoint_url=endpoint
                )
                prefetch(request)

            def get_all(dest: Path, prefix: str = prefix) -> None:
                # a copy script has to list too (aws s3 cp --recursive does)
                pages = client.get_paginator("list_objects_v2").paginate(
                    Bucket="bench", Prefix=prefix
                )
                for key in [obj["Key"] for page in pages for obj in page.get("Contents", [])]:
                    target = dest / key[len(prefix) :]
                    target.parent.mkdir(parents=True, exist_ok=True)
                    target.write_bytes(client.get_object(Bucket="bench", Key=key)["Body"].read())

            prefetch_s = _median_seconds(fetch, runs, scratch)
            copy_s = _median_seconds(get_all, runs, scratch)
            timed = [(_LABEL, prefetch_s), ("boto3 get loop", copy_s)]
            rows += _rows("s3 (moto)", name, files, size, copy_s, timed)
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
        parent.send("stop")
        server.join(timeout=10)
        if server.is_alive():
            server.terminate()
    return rows


def run_prefetch_bench(*, runs: int = 3) -> list[dict[str, Any]]:
    with tempfile.TemporaryDirectory(prefix="bench-prefetch-") as tmp:
        scratch = Path(tmp)
        return _bench_file(scratch, runs) + _bench_s3(scratch, runs)


if __name__ == "__main__":
    from benchmarks.table import markdown_table

    print(markdown_table(run_prefetch_bench()))
