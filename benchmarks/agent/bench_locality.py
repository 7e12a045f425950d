"""The measured locality's cost per audit: CPU time and bytes read by one LocalityProbe pass
(what `run` adds to each audit) with 110 pods on a DGX H100 (the kubelet's default maxPods),
on kernel-format fixtures (tests/agent/audit/cgroupfs.py) on tmpfs.

Rows: 8 GPU pods among 110 (one per GPU) and the worst case of every pod holding a GPU
(time-sliced GPUs), cgroup v2 and v1; and the numa_maps fallback (no memory cgroup) with 4
processes a GPU pod, each with 3000 mappings (a PyTorch rank's order of magnitude).
"""

from __future__ import annotations

import logging
import os
import tempfile
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from agent.audit.measure import PodRef
from agent.audit.node_rates import RemoteRates
from agent.audit.probe import LocalityProbe
from agent.audit.verdict import ContainerAudit
from agent.discovery.discover import DiscoveryOptions, discover
from tests.agent.audit.cgroupfs import CgroupFs, Container
from tests.agent.discovery.machines import build

__all__ = ["run_locality_bench"]

PODS = 110
_TMPFS = "/dev/shm" if Path("/dev/shm").is_dir() else None
_GIB = 1 << 30


@contextmanager
def _counting() -> Iterator[dict[str, int]]:
    """Bytes os.read returns and files os.open opens, while inside."""
    seen = {"bytes": 0, "files": 0}
    real_read, real_open = os.read, os.open

    def read(fd: int, n: int) -> bytes:
        data = real_read(fd, n)
        seen["bytes"] += len(data)
        return data

    def open_(path: Any, flags: int, *args: Any, **kw: Any) -> int:
        seen["files"] += 1
        return real_open(path, flags, *args, **kw)

    os.read, os.open = read, open_  # type: ignore[assignment]
    try:
        yield seen
    finally:
        os.read, os.open = real_read, real_open  # type: ignore[assignment]


def _audit(namespace: str, pod: str, gpu_numa: int) -> ContainerAudit:
    return ContainerAudit(namespace, pod, "trainer", "aligned", "", (), (), (), frozenset(),
                          False, frozenset({gpu_numa}), frozenset(), frozenset(), ())  # fmt: skip


def _node(tmp: Path, *, memory: int | None, gpu_pods: int, procs: int) -> tuple[Any, ...]:
    root = build("dgx-h100", tmp / "sys")
    fs = CgroupFs(root, tmp / "proc", memory=memory, cpuset=memory or 2)
    for node in (0, 1):
        fs.numastat(node, local=7_724_312, other=1000)
    refs, audits = [], []
    pid = 1000
    for i in range(PODS):
        uid, cid = str(uuid.UUID(int=i + 1)), f"{i:064x}"
        pids = list(range(pid, pid + procs))
        pid += procs
        gpu = i < gpu_pods
        fs.add_pod(uid, [Container(cid, range(4, 56), [0], pids=pids)],
                   qos="guaranteed" if gpu else "burstable",
                   memory_bytes={0: 40 * _GIB, 1: 2 * _GIB})  # fmt: skip
        refs.append(PodRef("ml", f"p{i}", uid, {"trainer": cid}))
        if gpu:
            audits.append(_audit("ml", f"p{i}", i % 2))
    if memory is None:  # realistic numa_maps sizes for the GPU pods' processes
        big = "".join(f"7f{m:010x} default anon=256 dirty=256 N0=200 N1=56 kernelpagesize_kB=4\n"
                      for m in range(3000))  # fmt: skip
        for i in range(gpu_pods):
            for p in range(1000 + i * procs, 1000 + (i + 1) * procs):
                (tmp / "proc" / str(p) / "numa_maps").write_text(big)
    topology = discover(DiscoveryOptions(sysfs_root=root, dataset_root=tmp / "none",
                                         use_nvml=False)).topology  # fmt: skip
    return root, topology, refs, tuple(audits)


def _row(name: str, tmp: Path, *, memory: int | None, gpu_pods: int, procs: int = 1,
         calls: int = 20) -> dict[str, Any]:  # fmt: skip
    root, topology, refs, audits = _node(tmp, memory=memory, gpu_pods=gpu_pods, procs=procs)
    rates = RemoteRates()

    def measure() -> Any:
        # A new probe each time: the numa_maps fallback's minute-long reuse is not measured,
        # its full read is (what one audit a minute pays).
        probe = LocalityProbe(sysfs_root=root, proc_root=tmp / "proc", rates=rates)
        return probe.measure(topology, audits, refs)

    report = measure()
    with _counting() as seen:
        measure()
    cpu = []
    for _ in range(calls):
        start = time.process_time()
        measure()
        cpu.append(time.process_time() - start)
    cpu.sort()
    return {
        "case": name,
        "GPU pods": gpu_pods,
        "source": report.pods[0].source if report.pods else "-",
        "CPU ms per audit (median)": round(cpu[len(cpu) // 2] * 1000, 2),
        "bytes read per audit": seen["bytes"],
        "files opened": seen["files"],
        "extra series": 3 * gpu_pods + 3 + 2,  # + 3 counts + one per NUMA node
    }


def run_locality_bench(*, calls: int = 20) -> list[dict[str, Any]]:
    logging.getLogger("agent").setLevel(logging.ERROR)
    cases = [
        ("110 pods, 8 on GPUs, cgroup v2", {"memory": 2, "gpu_pods": 8}),
        ("110 pods, 8 on GPUs, cgroup v1", {"memory": 1, "gpu_pods": 8}),
        ("110 pods, all on GPUs, cgroup v2", {"memory": 2, "gpu_pods": PODS}),
        ("110 pods, 8 on GPUs, numa_maps fallback", {"memory": None, "gpu_pods": 8, "procs": 4}),
    ]
    rows = []
    for name, kw in cases:
        with tempfile.TemporaryDirectory(dir=_TMPFS) as tmp:
            rows.append(_row(name, Path(tmp), calls=calls, **kw))
    return rows


if __name__ == "__main__":
    from benchmarks.table import markdown_table

    print(markdown_table(run_locality_bench()))
