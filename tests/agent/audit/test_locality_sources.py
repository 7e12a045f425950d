"""The locality readers on kernel-format files: memory.numa_stat (v1 pages, v2 bytes),
numa_maps, cpuset effective files, process status, node numastat; where each controller is on
pure v2, pure v1 and mixed hosts; garbled and vanishing files; and this machine's own files."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from agent.sources import SysfsError
from agent.sources import cgroups as cg
from agent.sources import procs as pr
from agent.sources.cpu import parse_cpulist
from agent.sources.numa_stat import (
    node_counters,
    parse_memcg_numa_stat,
    parse_numa_maps,
)
from tests.agent.audit.cgroupfs import (
    PAGE,
    CgroupFs,
    Container,
    container_mountinfo,
    host_mountinfo,
    numa_maps_text,
    v1_numa_stat,
)

GiB = 1 << 30
UID = "0c6f3a49-7b8e-4f53-9d0e-3f4c2b1a9e77"
CID = "4f1d2c3b5a6e7f8091a2b3c4d5e6f708192a3b4c5d6e7f8091a2b3c4d5e6f70"

# The kernel 6.8 item list, in its order and units (bytes), with the figures of a trainer
# whose heap is on node 0 and whose page cache is mostly on node 1.
REAL_V2 = """anon N0=52613349376 N1=1174405120
file N0=3221225472 N1=8589934592
kernel_stack N0=1490944 N1=294912
pagetables N0=105795584 N1=2985984
sec_pagetables N0=0 N1=0
shmem N0=2147483648 N1=0
file_mapped N0=419430400 N1=25165824
file_dirty N0=0 N1=4096
file_writeback N0=0 N1=0
swapcached N0=0 N1=0
anon_thp N0=48318382080 N1=0
file_thp N0=0 N1=0
shmem_thp N0=0 N1=0
inactive_anon N0=2151677952 N1=8192
active_anon N0=52609155072 N1=1174396928
inactive_file N0=2684354560 N1=8321499136
active_file N0=536870912 N1=268435456
unevictable N0=0 N1=0
slab_reclaimable N0=11534336 N1=3145728
slab_unreclaimable N0=7340032 N1=1048576
"""


def test_v2_numa_stat_counts_anon_and_file_bytes_per_node() -> None:
    assert parse_memcg_numa_stat(REAL_V2, 2) == {
        0: 52613349376 + 3221225472,
        1: 1174405120 + 8589934592,
    }


def test_v1_numa_stat_counts_hierarchical_pages_at_the_page_size() -> None:
    # A pod's own cgroup holds no process: only the hierarchical rows see its containers.
    text = v1_numa_stat({}, {0: 1000, 1: 3000}, [0, 1])
    assert parse_memcg_numa_stat(text, 1, page_size=PAGE) == {0: 1000 * PAGE, 1: 3000 * PAGE}
    # An old kernel without hierarchical rows: the cgroup's own total.
    own_only = "total=10 N0=4 N1=6\nfile=2 N0=1 N1=1\nanon=8 N0=3 N1=5\nunevictable=0 N0=0 N1=0\n"
    assert parse_memcg_numa_stat(own_only, 1, page_size=PAGE) == {0: 4 * PAGE, 1: 6 * PAGE}


@pytest.mark.parametrize(
    ("text", "version"),
    [
        (REAL_V2, 1),  # a v2 file read as v1 (mixed hierarchy mistaken)
        (v1_numa_stat({}, {0: 1}, [0]), 2),  # and the other way round
        ("anon N0=12 N1=x\nfile N0=1 N1=1\n", 2),
        ("anon N0=12\n", 2),  # no file row
        ("hierarchical_total=5 N0=5 N5000=1\n", 1),  # node number out of range
        ("", 1),
    ],
)
def test_garbled_numa_stat_is_refused(text: str, version: int) -> None:
    with pytest.raises(SysfsError):
        parse_memcg_numa_stat(text, version)


def test_numa_maps_sums_every_mapping_at_its_page_size() -> None:
    text = numa_maps_text({0: 100, 1: 300}, huge_pages={1: 4})
    # 210 + 40 + 33 pages of the binary, libc and stack on node 0; huge pages at 2 MiB.
    assert parse_numa_maps(text) == {
        0: (100 + 210 + 40 + 33) * 4096,
        1: 300 * 4096 + 4 * (2 << 20),
    }


def test_numa_maps_with_a_bad_page_size_is_refused() -> None:
    with pytest.raises(SysfsError):
        parse_numa_maps("7f00 default anon=1 N0=1 kernelpagesize_kB=four\n")


def test_node_counters_reads_numastat_and_names_a_garbled_node(tmp_path: Path) -> None:
    fs = CgroupFs(tmp_path / "sys", tmp_path / "proc")
    fs.numastat(0, local=7724312, other=12)
    fs.numastat(1, local=100, other=50)
    (tmp_path / "sys/devices/system/node/node2").mkdir()
    (tmp_path / "sys/devices/system/node/node2/numastat").write_text("numa_hit 5\n")
    counters, problems = node_counters(tmp_path / "sys")
    assert sorted(counters) == [0, 1]
    assert (counters[0].local_node, counters[0].other_node) == (7724312, 12)
    assert len(problems) == 1 and "node2/numastat" in problems[0] and "local_node" in problems[0]


@pytest.mark.parametrize(
    ("memory", "cpuset", "want"),
    [
        (2, 2, (2, 2)),  # pure v2
        (1, 1, (1, 1)),  # pure v1 (or hybrid: v1 controllers, an empty unified tree)
        (1, 2, (1, 2)),  # mixed: memory still on v1, cpuset moved to the unified tree
        (2, 1, (2, 1)),
        (None, 1, (None, 1)),  # no memory controller mounted
    ],
)
def test_each_controller_is_found_on_its_own_version(
    tmp_path: Path, memory: int | None, cpuset: int | None, want: tuple[int | None, ...]
) -> None:
    CgroupFs(tmp_path, tmp_path / "proc", memory=memory, cpuset=cpuset)
    lay = cg.layout(tmp_path)
    got = (lay.memory.version if lay.memory else None, lay.cpuset.version if lay.cpuset else None)
    assert got == want


@pytest.mark.parametrize("driver", ["systemd", "cgroupfs"])
@pytest.mark.parametrize("qos", ["guaranteed", "burstable", "besteffort"])
def test_pod_directories_are_found_under_each_driver_and_qos(
    tmp_path: Path, driver: str, qos: str
) -> None:
    fs = CgroupFs(tmp_path, tmp_path / "proc", driver=driver)
    fs.add_pod(UID, [Container(CID, [0, 1], [0], pids=[4242])], qos=qos,
               memory_bytes={0: GiB})  # fmt: skip
    lay = cg.layout(tmp_path)
    assert lay.memory is not None
    dirs = cg.pod_dirs(lay.memory)
    assert list(dirs) == [UID]
    (child,) = cg.children(dirs[UID])
    assert CID in os.path.basename(child)
    assert cg.cpuset_effective(child, 2) == (frozenset({0, 1}), frozenset({0}))
    assert cg.procs(dirs[UID]) == [4242]


def test_cpuset_v1_files_and_a_garbled_list(tmp_path: Path) -> None:
    fs = CgroupFs(tmp_path, tmp_path / "proc", memory=1, cpuset=1, driver="cgroupfs")
    fs.add_pod(UID, [Container(CID, range(56, 112), [1])])
    lay = cg.layout(tmp_path)
    assert lay.cpuset is not None
    (child,) = cg.children(cg.pod_dirs(lay.cpuset)[UID])
    assert cg.cpuset_effective(child, 1) == (frozenset(range(56, 112)), frozenset({1}))
    Path(child, "cpuset.effective_cpus").write_text("56-x\n")
    with pytest.raises(SysfsError, match="not a list"):
        cg.cpuset_effective(child, 1)


def test_processes_are_found_by_their_cgroup_and_read(tmp_path: Path) -> None:
    proc = tmp_path / "proc"
    fs = CgroupFs(tmp_path / "sys", proc, memory=None, cpuset=None)
    fs.add_pod(UID, [Container(CID, [2, 3], [0], pids=[101, 102])], memory_bytes={1: 8 * PAGE})
    (proc / "7").mkdir()
    (proc / "7/cgroup").write_text("0::/system.slice/sshd.service\n")
    (proc / "self").mkdir()  # non-numeric entries are not processes
    assert pr.pods_pids(proc) == {UID: [101, 102]}
    assert pr.allowed(proc, 101) == (frozenset({2, 3}), frozenset({0}))
    assert pr.numa_maps(proc, 101)[0][1] == 8 * PAGE


UID2 = "5d2e8f10-1a2b-4c3d-8e4f-5a6b7c8d9e0f"


def test_processes_in_no_pod_cgroup_are_found_by_the_pod_files_they_mount(tmp_path: Path) -> None:
    """`cgroupsPerQOS: false`: the runtime gets no pod cgroup, so /proc/<pid>/cgroup names no
    pod; the container's mount table still holds the kubelet's files of its own pod."""
    proc = tmp_path / "proc"
    fs = CgroupFs(tmp_path / "sys", proc, memory=None, cpuset=None)
    fs.add_pod(UID, [Container(CID, [2, 3], [0], pids=[201, 202])], cgroups=False,
               proc_pages={201: {1: 8}})  # fmt: skip
    for pid, mounts in (
        (1, host_mountinfo([UID])),  # the host sees one pod's volumes under the pod's directory
        (300, host_mountinfo([UID, UID2])),  # the kubelet, in the host's mount namespace
        (301, container_mountinfo(UID) + container_mountinfo(UID2)),  # mounts both: a plugin
    ):
        (proc / str(pid)).mkdir(parents=True)
        (proc / str(pid) / "cgroup").write_text("0::/system.slice/kubelet.service\n")
        (proc / str(pid) / "mountinfo").write_text(mounts)
    (proc / "302").mkdir()
    (proc / "302/cgroup").write_text("0::/\n")  # exited before its mount table was read
    assert pr.pods_pids(proc) == {UID: [201, 202]}
    assert pr.numa_maps(proc, 201)[0][1] == 8 * PAGE


@pytest.mark.parametrize(
    ("mounts", "want"),
    [
        (container_mountinfo(UID), UID),
        (container_mountinfo(UID, kubelet="/data/kubelet"), UID),  # --root-dir elsewhere
        (host_mountinfo([UID]), None),
        (container_mountinfo(UID) + container_mountinfo(UID2), None),
        ("", None),
        ("garbage\n1 2 3\n", None),
    ],
)
def test_a_mount_table_names_one_pod_or_none(mounts: str, want: str | None) -> None:
    assert pr.pod_of_mounts(mounts) == want


def test_the_mount_table_search_is_bounded(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    proc = tmp_path / "proc"
    fs = CgroupFs(tmp_path / "sys", proc, memory=None, cpuset=None)
    fs.add_pod(UID, [Container(CID, [2], [0], pids=[201, 202, 203])], cgroups=False)
    monkeypatch.setattr(pr, "MOUNTINFO_BUDGET", 2 * len(container_mountinfo(UID)))
    with pytest.raises(SysfsError, match="MiB of mountinfo"):
        pr.pods_pids(proc)


def test_a_process_that_exits_while_read_is_missing_not_empty(tmp_path: Path) -> None:
    proc = tmp_path / "proc"
    (proc / "55").mkdir(parents=True)
    (proc / "55/numa_maps").write_text("")  # what an exiting (zombie) process shows
    with pytest.raises(SysfsError) as gone:
        pr.numa_maps(proc, 55)
    assert gone.value.missing
    with pytest.raises(SysfsError) as absent:
        pr.numa_maps(proc, 56)
    assert absent.value.missing


def test_this_machines_own_files(tmp_path: Path) -> None:
    """The readers on this machine's /sys and /proc: what the kernel prints parses."""
    counters, problems = node_counters(Path("/sys"))
    nodes = sorted(int(n[4:]) for n in os.listdir("/sys/devices/system/node")
                   if n.startswith("node") and n[4:].isdigit())  # fmt: skip
    assert sorted(counters) == nodes and problems == ()
    assert all(c.numa_hit >= c.local_node >= 0 for c in counters.values()) or nodes == []
    own, size = pr.numa_maps(Path("/proc"), os.getpid())
    assert size > 0
    assert set(own) <= set(nodes) and sum(own.values()) > 0
    cpus, mems = pr.allowed(Path("/proc"), os.getpid())
    assert cpus == frozenset(os.sched_getaffinity(0))
    assert mems <= set(nodes)
    lay = cg.layout(Path("/sys"))
    if lay.memory is not None:  # this process's own memory cgroup, read as pods are read
        line = next(row for row in Path("/proc/self/cgroup").read_text().splitlines()
                    if (lay.memory.version == 2 and row.startswith("0::"))
                    or (lay.memory.version == 1 and ":memory:" in row))  # fmt: skip
        path = Path(lay.memory.mount) / line.split(":", 2)[2].lstrip("/") / "memory.numa_stat"
        if path.exists():
            stat = parse_memcg_numa_stat(path.read_text(), lay.memory.version,
                                         page_size=os.sysconf("SC_PAGE_SIZE"))  # fmt: skip
            assert set(stat) <= set(nodes)
    online = parse_cpulist(Path("/sys/devices/system/cpu/online").read_text())
    assert cpus <= online
