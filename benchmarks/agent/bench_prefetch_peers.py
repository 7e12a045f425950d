"""`topoplace-agent prefetch` next to the fastest S3 copiers, side by side in one run.

The server is versitygw (Go, posix backend, built from the Go module proxy into
~/.cache/topoplace/bench/ by `ensure_versitygw`), on 127.0.0.1: a real S3 implementation
that is not itself the bottleneck the way single-threaded moto is. The same objects are
fetched by each tool, each run into a new, empty directory (a cold cache), the tools taking
turns within a run so that none gets a warmer server:
- `topoplace-agent prefetch` (the init container's command: listing, size and MD5 checks,
  syncfs, rename, marker);
- `s5cmd cp` (Go, 256 parallel workers by default), and the same followed by `sync -f`:
  what the copy costs when it must be on disk, as prefetch's is before its marker (not a
  peer for the ratios);
- `aws s3 cp --recursive` (awscli, s3transfer with 10 threads);
- two engine probes in Python, list + 8 parallel GETs and nothing else, for choosing the
  transfer engine: s3fs (what prefetch uses) and obstore (Rust object_store).
Each is a separate process started by a small launcher; peak RSS comes from wait4() (so
a ~10 MiB floor is the launcher's). "× fastest peer" divides the fastest of s5cmd and aws
by the row's seconds (prefetch's target: ≥ 0.9 on large objects, ≥ 1.0 on many small
files). Medians of `runs` runs: 9 by default, as on a shared 2-core machine medians of 5
swung by ±0.1 from one run to the next.

Run alone: `python -m benchmarks.agent.bench_prefetch_peers [--quick]` (--quick: one run, and
the 2 GiB case left out).
"""

from __future__ import annotations

import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

__all__ = ["ensure_versitygw", "run_prefetch_peers_bench"]

BIN_DIR = Path.home() / ".cache/topoplace/bench"
VERSITYGW = "github.com/versity/versitygw/cmd/versitygw@v1.8.0"
KEY, SECRET = "benchbenchbench", "benchbenchbenchbenchbench"
MIB = 1024 * 1024
CASES: dict[str, tuple[int, int]] = {  # name -> (objects, bytes per object)
    "2000 × 4 KiB": (2000, 4 * 1024),
    "4 × 256 MiB": (4, 256 * MIB),
    "1 × 2 GiB": (1, 2048 * MIB),
}
PEERS = ("s5cmd cp", "aws s3 cp --recursive")

_ENGINE_PROBE = r"""
import asyncio, os, sys, time
engine, endpoint, bucket, prefix, dest = sys.argv[1:6]
async def s3fs_main():
    import s3fs
    fs = s3fs.S3FileSystem(endpoint_url=endpoint, asynchronous=True, skip_instance_cache=True)
    session = await fs.set_session()
    keys = [k for k in await fs._find(f"{bucket}/{prefix}")]
    sem = asyncio.Semaphore(8)
    async def one(k):
        async with sem:
            target = os.path.join(dest, k[len(bucket) + 1 + len(prefix):])
            os.makedirs(os.path.dirname(target), exist_ok=True)
            await fs._get_file(k, target)
    await asyncio.gather(*(one(k) for k in keys))
    await session.close()
async def obstore_main():
    import obstore
    from obstore.store import S3Store
    store = S3Store(bucket, endpoint=endpoint, client_options={"allow_http": True},
                    region="us-east-1", access_key_id=os.environ["AWS_ACCESS_KEY_ID"],
                    secret_access_key=os.environ["AWS_SECRET_ACCESS_KEY"])
    keys = [m["path"] for batch in obstore.list(store, prefix=prefix) for m in batch]
    sem = asyncio.Semaphore(8)
    async def one(k):
        async with sem:
            target = os.path.join(dest, k[len(prefix):])
            os.makedirs(os.path.dirname(target), exist_ok=True)
            resp = await obstore.get_async(store, k)
            with open(target, "wb") as out:
                async for chunk in resp.stream(min_chunk_size=8 * 1024 * 1024):
                    out.write(chunk)
    await asyncio.gather(*(one(k) for k in keys))
asyncio.run(s3fs_main() if engine == "s3fs" else obstore_main())
os._exit(0)  # the copy is done: obstore's runtime can abort at interpreter teardown
"""


def ensure_versitygw() -> Path:
    """The versitygw binary, built with `go install` on first use (a few minutes)."""
    binary = BIN_DIR / "versitygw"
    if not binary.exists():
        BIN_DIR.mkdir(parents=True, exist_ok=True)
        print(f"building {VERSITYGW} (first run only)", file=sys.stderr, flush=True)
        subprocess.run(
            ["go", "install", VERSITYGW], env={**os.environ, "GOBIN": str(BIN_DIR)}, check=True
        )
    return binary


def _env(endpoint: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    return env | {
        "AWS_ACCESS_KEY_ID": KEY,
        "AWS_SECRET_ACCESS_KEY": SECRET,
        "AWS_DEFAULT_REGION": "us-east-1",
        "AWS_ENDPOINT_URL": endpoint,
        "AWS_CONFIG_FILE": os.devnull,
        "AWS_SHARED_CREDENTIALS_FILE": os.devnull,
        "AWS_EC2_METADATA_DISABLED": "true",
    }


def _commands(endpoint: str, prefix: str, dest: Path) -> dict[str, list[str]]:
    venv = Path(sys.executable).parent
    url = f"s3://bench/{prefix}"
    return {
        "topoplace-agent prefetch": [
            str(venv / "topoplace-agent"), "prefetch", "--dataset", "bench", "--version", "v1",
            "--source", url, "--cache-root", str(dest), "--s3-endpoint-url", endpoint,
            "--log-level", "warning",
        ],
        "s5cmd cp": [
            str(venv / "s5cmd"), "--endpoint-url", endpoint, "cp", f"{url}*", f"{dest}/",
        ],
        "s5cmd cp, then sync": [
            "/bin/sh", "-c", '"$0" --endpoint-url "$1" cp "$2*" "$3/" && sync -f "$3"',
            str(venv / "s5cmd"), endpoint, url, str(dest),
        ],
        "aws s3 cp --recursive": [
            str(venv / "aws"), "--endpoint-url", endpoint, "s3", "cp", "--recursive",
            "--only-show-errors", url, str(dest),
        ],
        "engine probe: s3fs": [sys.executable, "-c", _ENGINE_PROBE, "s3fs", endpoint, "bench",
                               prefix, str(dest)],
        "engine probe: obstore": [sys.executable, "-c", _ENGINE_PROBE, "obstore", endpoint,
                                  "bench", prefix, str(dest)],
    }  # fmt: skip


# A small launcher starts each tool: a child's peak RSS (ru_maxrss) counts the memory of the
# process that forked it, so forking from this one (hundreds of MiB after moto) would inflate
# every figure. The launcher is ~10 MiB; it times the tool alone and reports both.
_LAUNCHER = r"""
import os, sys, time
devnull = os.open(os.devnull, os.O_WRONLY)
started = time.perf_counter()
pid = os.posix_spawn(sys.argv[1], sys.argv[1:], os.environ, file_actions=[
    (os.POSIX_SPAWN_DUP2, devnull, 1)])
_, status, usage = os.wait4(pid, 0)
print(os.waitstatus_to_exitcode(status), time.perf_counter() - started, usage.ru_maxrss)
"""


def _timed(argv: Sequence[str], env: dict[str, str]) -> tuple[float, float]:
    """(seconds, peak RSS MiB) of one process run to completion; fails loudly on error."""
    done = subprocess.run(
        [sys.executable, "-c", _LAUNCHER, *argv], env=env, capture_output=True, text=True
    )
    rc, seconds, maxrss = done.stdout.split()
    if int(rc) != 0 or done.returncode != 0:
        raise RuntimeError(f"{argv[0]} exited {rc}: {done.stderr[-2000:]}")
    return float(seconds), int(maxrss) / 1024


def _files_and_bytes(dest: Path) -> tuple[int, int]:
    files = [p for p in dest.rglob("*") if p.is_file() and not p.name.startswith(".topoplace")]
    return len(files), sum(p.stat().st_size for p in files)


def _upload(env: dict[str, str], endpoint: str, scratch: Path, prefix: str, n: int, size: int):
    local = scratch / "upload"
    blob = os.urandom(min(size, 64 * MIB))
    for i in range(n):
        path = local / f"part-{i // 100:03d}" / f"obj-{i:05d}.bin"
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(path, "wb") as out:
            out.write(i.to_bytes(8, "big"))
            left = size - 8
            while left > 0:
                chunk = blob[: min(left, len(blob))]
                out.write(chunk)
                left -= len(chunk)
    s5cmd = str(Path(sys.executable).parent / "s5cmd")
    subprocess.run(
        [s5cmd, "--endpoint-url", endpoint, "cp", f"{local}/", f"s3://bench/{prefix}"],
        env=env, check=True, stdout=subprocess.DEVNULL,
    )  # fmt: skip
    shutil.rmtree(local)


def run_prefetch_peers_bench(
    *, runs: int = 9, cases: Sequence[str] | None = None
) -> list[dict[str, Any]]:
    binary = ensure_versitygw()
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="bench-peers-") as tmp:
        scratch = Path(tmp)
        (scratch / "gw/bench").mkdir(parents=True)
        port = _free_port()
        endpoint = f"http://127.0.0.1:{port}"
        env = _env(endpoint)
        server = _start(binary, port, scratch / "gw", env)
        try:
            for name in cases or list(CASES):
                n, size = CASES[name]
                prefix = f"c{n}x{size}/"
                _upload(env, endpoint, scratch, prefix, n, size)
                rows += _bench_case(name, n, size, prefix, endpoint, env, scratch, runs)
                shutil.rmtree(scratch / "gw/bench" / prefix.rstrip("/"), ignore_errors=True)
        finally:
            server.terminate()
            server.wait(timeout=15)
    return rows


def _bench_case(
    name: str, n: int, size: int, prefix: str, endpoint: str, env: dict[str, str],
    scratch: Path, runs: int,
) -> list[dict[str, Any]]:  # fmt: skip
    times: dict[str, list[float]] = {}
    rss: dict[str, float] = {}
    for run in range(runs):
        for tool in _commands(endpoint, prefix, scratch):
            dest = scratch / f"dest-{run}-{len(times.get(tool, []))}-{abs(hash(tool))}"
            dest.mkdir()
            argv = _commands(endpoint, prefix, dest)[tool]
            os.sync()  # the last tool's dirty pages must not be flushed on this one's time
            try:
                seconds, peak = _timed(argv, env)
            except RuntimeError as exc:
                if not tool.startswith("engine probe"):
                    raise  # the product and the peers must not fail
                # A probe (a bare script) that still dies: one more try, said aloud.
                print(f"  {name} · {tool}: {exc}; running it again", file=sys.stderr)
                shutil.rmtree(dest)
                dest.mkdir()
                os.sync()
                seconds, peak = _timed(argv, env)
            got = _files_and_bytes(dest)
            if got != (n, n * size):
                raise RuntimeError(f"{tool} fetched {got}, expected {(n, n * size)}")
            times.setdefault(tool, []).append(seconds)
            rss[tool] = max(rss.get(tool, 0.0), peak)
            shutil.rmtree(dest)
            print(f"  {name} · {tool}: {seconds:.2f} s", file=sys.stderr, flush=True)
    medians = {tool: statistics.median(t) for tool, t in times.items()}
    fastest = min(medians[p] for p in PEERS)
    return [
        {
            "case": name,
            "tool": tool,
            "seconds": seconds,
            "MB/s": n * size / seconds / 1e6,
            "× fastest peer": fastest / seconds,
            "peak RSS MiB": rss[tool],
        }
        for tool, seconds in medians.items()
    ]


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _start(binary: Path, port: int, root: Path, env: dict[str, str]) -> subprocess.Popen[bytes]:
    import socket

    proc = subprocess.Popen(
        [str(binary), "--access", KEY, "--secret", SECRET, "--port", f"127.0.0.1:{port}",
         "posix", str(root)],
        env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return proc
        if proc.poll() is not None:
            raise RuntimeError(f"versitygw exited {proc.returncode}")
        time.sleep(0.05)  # a server starting: nothing to wait on but its port
    proc.kill()
    raise RuntimeError("versitygw did not listen within 30 s")


if __name__ == "__main__":
    from benchmarks.table import markdown_table

    quick = "--quick" in sys.argv
    chosen = [c for c in CASES if not (quick and "GiB" in c)]
    print(markdown_table(run_prefetch_peers_bench(runs=1 if quick else 9, cases=chosen)))
