"""cgroupfs, procfs and node numastat trees laid out as the kernel lays them out, for the
locality audit.

Formats (as printed by the kernel, mm/memcontrol.c, fs/proc/task_mmu.c, drivers/base/node.c):
- v2 `memory.numa_stat`: `<item> N0=<bytes> N1=<bytes>` for every item below;
- v1 `memory.numa_stat`: `<item>=<pages> N0=<pages> …` for total/file/anon/unevictable, then
  the `hierarchical_` rows (the cgroup and its children);
- `numa_maps`: `<start> <policy> [file=…] [anon=…] … N<i>=<pages> kernelpagesize_kB=<k>`;
- `numastat`: `numa_hit`, `numa_miss`, `numa_foreign`, `interleave_hit`, `local_node`,
  `other_node`, one `name value` per line;
- pod directories as the kubelet names them with the systemd (`kubepods-burstable-pod<uid_>
  .slice/cri-containerd-<id>.scope`) and cgroupfs (`kubepods/burstable/pod<uid>/<id>`) drivers;
- `mountinfo` (fs/proc_namespace.c, `show_mountinfo`): `<id> <parent> <maj:min> <root>
  <mount point> <options> [optional…] - <fstype> <source> <super options>`, as containerd
  gives a container (the kubelet's etc-hosts and termination log bound in, from
  `/var/lib/kubelet/pods/<uid>/`) and as the host sees a pod's volumes.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from tests.agent.discovery.sysfs_builder import cpulist

__all__ = [
    "CgroupFs",
    "Container",
    "container_mountinfo",
    "host_mountinfo",
    "numa_maps_text",
    "numastat_text",
    "v1_numa_stat",
    "v2_numa_stat",
]

PAGE = 4096
V2_CONTROLLERS = "cpuset cpu io memory hugetlb pids rdma misc"
V2_ITEMS = ("anon", "file", "kernel_stack", "pagetables", "sec_pagetables", "shmem",
            "file_mapped", "file_dirty", "file_writeback", "swapcached", "anon_thp", "file_thp",
            "shmem_thp", "inactive_anon", "active_anon", "inactive_file", "active_file",
            "unevictable", "slab_reclaimable", "slab_unreclaimable")  # fmt: skip


def _per_node(values: Mapping[int, int], nodes: Iterable[int]) -> str:
    return " ".join(f"N{n}={values.get(n, 0)}" for n in nodes)


def v2_numa_stat(anon: Mapping[int, int], file: Mapping[int, int], nodes: Iterable[int]) -> str:
    """Bytes per node; the other items as a real cgroup shows them (small, non-zero)."""
    nodes = list(nodes)
    rows = []
    for item in V2_ITEMS:
        if item == "anon":
            values = anon
        elif item == "file":
            values = file
        elif item in ("kernel_stack", "pagetables", "slab_reclaimable", "slab_unreclaimable"):
            values = dict.fromkeys(nodes, 16384 * 4)
        elif item in ("active_anon", "inactive_anon"):
            values = {n: b // 2 for n, b in anon.items()}
        else:
            values = {}
        rows.append(f"{item} {_per_node(values, nodes)}")
    return "\n".join(rows) + "\n"


def v1_numa_stat(own: Mapping[int, int], children: Mapping[int, int], nodes: Iterable[int]) -> str:
    """Pages per node: `own` the cgroup's own (0 for a pod), `children` its containers'."""
    nodes = list(nodes)
    rows = []
    total = {n: own.get(n, 0) + children.get(n, 0) for n in nodes}
    for prefix, values in (("", own), ("hierarchical_", total)):
        anon = {n: v * 3 // 4 for n, v in values.items()}
        file = {n: values.get(n, 0) - anon.get(n, 0) for n in nodes}
        for item, row in (("total", values), ("file", file), ("anon", anon), ("unevictable", {})):
            rows.append(f"{prefix}{item}={sum(row.values())} {_per_node(row, nodes)}")
    return "\n".join(rows) + "\n"


def numa_maps_text(pages: Mapping[int, int], *, huge_pages: Mapping[int, int] | None = None) -> str:
    """A python process's mappings: the binary, libraries, a big anonymous heap, the stack."""
    heap = " ".join(f"N{n}={p}" for n, p in sorted(pages.items()) if p)
    lines = [
        "55d4c8a00000 default file=/usr/bin/python3.11 mapped=210 mapmax=3 N0=210 "
        "kernelpagesize_kB=4",
        f"7f2a00000000 default anon={sum(pages.values())} dirty={sum(pages.values())} "
        f"active=0 {heap} kernelpagesize_kB=4",
        "7f2b10000000 default file=/usr/lib/x86_64-linux-gnu/libc.so.6 mapped=40 mapmax=90 "
        "N0=40 kernelpagesize_kB=4",
        "7f2b20000000 default",  # reserved, nothing faulted in
    ]
    if huge_pages:
        huge = " ".join(f"N{n}={p}" for n, p in sorted(huge_pages.items()))
        n = sum(huge_pages.values())
        lines.append(
            f"7f3c40000000 default file=/anon_hugepage\\040(deleted) huge anon={n} dirty={n} "
            f"{huge} kernelpagesize_kB=2048"
        )
    lines.append("7ffd5c3d2000 default stack anon=33 dirty=33 N0=33 kernelpagesize_kB=4")
    return "\n".join(lines) + "\n"


def numastat_text(local: int, other: int, *, miss: int = 0, foreign: int = 0) -> str:
    return (f"numa_hit {local + other - miss}\nnuma_miss {miss}\nnuma_foreign {foreign}\n"
            f"interleave_hit 1078\nlocal_node {local}\nother_node {other}\n")  # fmt: skip


def container_mountinfo(
    uid: str, name: str = "trainer", *, kubelet: str = "/var/lib/kubelet"
) -> str:
    """A containerd container's mount table: its image, /proc, /dev, /sys, and the files the
    kubelet binds in from the pod's directory (etc-hosts, the termination log)."""
    snap = "/var/lib/containerd/io.containerd.snapshotter.v1.overlayfs/snapshots"
    sandbox = "/var/lib/containerd/io.containerd.grpc.v1.cri/sandboxes/9e9e9e9e5a6e7f80"
    pod = f"{kubelet}/pods/{uid}"
    return (
        f"1346 1204 0:180 / / rw,relatime master:377 - overlay overlay rw,lowerdir={snap}/55/fs,"
        f"upperdir={snap}/60/fs,workdir={snap}/60/work\n"
        "1347 1346 0:183 / /proc rw,nosuid,nodev,noexec,relatime - proc proc rw\n"
        "1348 1346 0:184 / /dev rw,nosuid - tmpfs tmpfs rw,size=65536k,mode=755\n"
        "1349 1348 0:185 / /dev/pts rw,nosuid,noexec,relatime - devpts devpts rw,gid=5,"
        "mode=620,ptmxmode=666\n"
        "1351 1346 0:187 / /sys ro,nosuid,nodev,noexec,relatime - sysfs sysfs ro\n"
        "1352 1351 0:30 / /sys/fs/cgroup ro,nosuid,nodev,noexec,relatime - cgroup2 cgroup rw\n"
        f"1353 1346 259:1 {pod}/etc-hosts /etc/hosts rw,relatime - ext4 /dev/nvme0n1p1 rw\n"
        f"1354 1348 259:1 {pod}/containers/{name}/4e0e6b1e /dev/termination-log rw,relatime - "
        "ext4 /dev/nvme0n1p1 rw\n"
        f"1355 1346 259:1 {sandbox}/hostname /etc/hostname rw,relatime - ext4 /dev/nvme0n1p1 rw\n"
        f"1356 1346 259:1 {sandbox}/resolv.conf /etc/resolv.conf rw,relatime - ext4 "
        "/dev/nvme0n1p1 rw\n"
        "1357 1348 0:175 / /dev/shm rw,nosuid,nodev,noexec,relatime - tmpfs shm rw,size=65536k\n"
        "1358 1346 0:170 / /run/secrets/kubernetes.io/serviceaccount ro,relatime - tmpfs tmpfs "
        "rw,size=1048576k\n"
    )


def host_mountinfo(uids: Iterable[str], *, kubelet: str = "/var/lib/kubelet") -> str:
    """The host's mount table on a node running `uids`: each pod's token tmpfs and a subPath
    bind, mounted under the pod's own directory."""
    lines = [
        "22 1 259:1 / / rw,relatime shared:1 - ext4 /dev/nvme0n1p1 rw",
        "23 22 0:21 / /proc rw,nosuid,nodev,noexec,relatime shared:12 - proc proc rw",
        "24 22 0:22 / /sys rw,nosuid,nodev,noexec,relatime shared:7 - sysfs sysfs rw",
    ]
    for i, uid in enumerate(uids):
        pod = f"{kubelet}/pods/{uid}"
        lines.append(f"{900 + 2 * i} 22 0:{170 + i} / {pod}/volumes/kubernetes.io~projected/"
                     f"kube-api-access-8xk2p rw,relatime shared:{410 + i} - tmpfs tmpfs "
                     "rw,size=1048576k")  # fmt: skip
        lines.append(f"{901 + 2 * i} 22 259:1 {pod}/volumes/kubernetes.io~configmap/cfg/"
                     f"..2026_12_06/a.yaml {pod}/volume-subpaths/cfg/trainer/0 rw,relatime "
                     "shared:1 - ext4 /dev/nvme0n1p1 rw")  # fmt: skip
    return "\n".join(lines) + "\n"


@dataclass
class Container:
    id: str
    cpus: Iterable[int]
    mems: Iterable[int]
    pids: list[int] = field(default_factory=list)


class CgroupFs:
    """Writes under a sysfs root (`fs/cgroup/...`) and a proc root.

    `memory`/`cpuset`: 1 or 2 (the controller's version) or None (not mounted); `driver`:
    `systemd` or `cgroupfs`.
    """

    def __init__(
        self,
        sysfs: Path,
        proc: Path,
        *,
        memory: int | None = 2,
        cpuset: int | None = 2,
        driver: str = "systemd",
        nodes: Iterable[int] = (0, 1),
    ) -> None:
        self.sysfs, self.proc, self.driver = sysfs, proc, driver
        self.memory, self.cpuset, self.nodes = memory, cpuset, list(nodes)
        base = sysfs / "fs/cgroup"
        base.mkdir(parents=True, exist_ok=True)
        v2 = [c for c, v in (("memory", memory), ("cpuset", cpuset)) if v == 2]
        if memory != 1 and cpuset != 1:  # pure v2 (unified at the root)
            self._write(base / "cgroup.controllers", " ".join(v2) or "")
        else:  # hybrid: v1 controllers, a v2 tree at unified/ with what is bound there
            self._write(base / "unified/cgroup.controllers", " ".join(v2))
            (base / "systemd").mkdir(exist_ok=True)
            for name, version in (("memory", memory), ("cpuset", cpuset)):
                if version == 1:
                    (base / name).mkdir(exist_ok=True)

    @staticmethod
    def _write(path: Path, text: str) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text if text.endswith("\n") else text + "\n")

    def _tree(self, version: int | None, name: str) -> Path:
        base = self.sysfs / "fs/cgroup"
        if version == 1:
            return base / name
        return base if (self.memory != 1 and self.cpuset != 1) else base / "unified"

    def pod_dir(self, tree: Path, uid: str, qos: str) -> Path:
        if self.driver == "systemd":
            u = uid.replace("-", "_")
            if qos == "guaranteed":
                return tree / "kubepods.slice" / f"kubepods-pod{u}.slice"
            return (
                tree / "kubepods.slice" / f"kubepods-{qos}.slice" / f"kubepods-{qos}-pod{u}.slice"
            )
        if qos == "guaranteed":
            return tree / "kubepods" / f"pod{uid}"
        return tree / "kubepods" / qos / f"pod{uid}"

    def container_name(self, cid: str) -> str:
        return f"cri-containerd-{cid}.scope" if self.driver == "systemd" else cid

    def add_pod(
        self,
        uid: str,
        containers: list[Container],
        *,
        qos: str = "guaranteed",
        memory_bytes: Mapping[int, int] | None = None,
        proc_pages: Mapping[int, Mapping[int, int]] | None = None,
        cgroups: bool = True,
    ) -> None:
        """A pod: its cgroups in every mounted hierarchy, its processes under /proc.
        `memory_bytes`: what memory.numa_stat says (anon); `proc_pages`: pid → pages per node
        for numa_maps (default: memory_bytes spread over the first process); `cgroups=False`:
        processes only, in no pod cgroup (`cgroupsPerQOS: false`)."""
        memory_bytes = memory_bytes or {}
        if not cgroups:
            for c in containers:
                for pid in c.pids:
                    pages = (proc_pages or {}).get(pid, {})
                    self.add_process(pid, uid, c, pages, cgroup=False)
            return
        trees = {self._tree(v, n) for n, v in (("memory", self.memory),
                                                ("cpuset", self.cpuset))}  # fmt: skip
        trees.add(self._tree(None, "unified"))
        if self.memory == 1 or self.cpuset == 1:
            trees.add(self.sysfs / "fs/cgroup/systemd")
        for tree in trees:
            pod = self.pod_dir(tree, uid, qos)
            self._write(pod / "cgroup.procs", "")
            for c in containers:
                self._write(pod / self.container_name(c.id) / "cgroup.procs",
                            "".join(f"{p}\n" for p in c.pids))  # fmt: skip
        if self.memory is not None:
            pod = self.pod_dir(self._tree(self.memory, "memory"), uid, qos)
            if self.memory == 2:
                text = v2_numa_stat(memory_bytes, {}, self.nodes)
            else:
                pages = {n: b // PAGE for n, b in memory_bytes.items()}
                text = v1_numa_stat({}, pages, self.nodes)
            self._write(pod / "memory.numa_stat", text)
        if self.cpuset is not None:
            pod = self.pod_dir(self._tree(self.cpuset, "cpuset"), uid, qos)
            names = (("cpuset.cpus.effective", "cpuset.mems.effective") if self.cpuset == 2
                     else ("cpuset.effective_cpus", "cpuset.effective_mems"))  # fmt: skip
            for c in containers:
                d = pod / self.container_name(c.id)
                self._write(d / names[0], cpulist(c.cpus))
                self._write(d / names[1], cpulist(c.mems))
        pages_by_pid = proc_pages or {}
        pids = [p for c in containers for p in c.pids]
        for c in containers:
            for pid in c.pids:
                default = {n: b // PAGE for n, b in memory_bytes.items()} if pid == pids[0] else {}
                self.add_process(pid, uid, c, pages_by_pid.get(pid, default))

    def add_process(
        self, pid: int, uid: str, c: Container, pages: Mapping[int, int], *, cgroup: bool = True
    ) -> None:
        """`cgroup=False`: the process sits in no pod cgroup (a kubelet with `cgroupsPerQOS:
        false`), found by the pod files its container mounts."""
        d = self.proc / str(pid)
        self._write(d / "mountinfo", container_mountinfo(uid))
        if not cgroup:
            path = "/"
        elif self.driver == "systemd":
            u = uid.replace("-", "_")
            path = f"/kubepods.slice/kubepods-pod{u}.slice/{self.container_name(c.id)}"
        else:
            path = f"/kubepods/pod{uid}/{c.id}"
        v1 = f"12:memory:{path}\n4:cpuset:{path}\n1:name=systemd:{path}\n0::/\n"
        self._write(d / "cgroup", f"0::{path}\n" if self.memory != 1 else v1)
        self._write(d / "numa_maps", numa_maps_text(pages))
        self._write(d / "status", f"Name:\tpython3\nState:\tS (sleeping)\nPid:\t{pid}\n"
                    f"Cpus_allowed:\tffffffff\nCpus_allowed_list:\t{cpulist(c.cpus)}\n"
                    f"Mems_allowed:\t00000000,00000003\nMems_allowed_list:\t{cpulist(c.mems)}\n"
                    "voluntary_ctxt_switches:\t150\n")  # fmt: skip

    def numastat(self, node: int, local: int, other: int) -> None:
        self._write(self.sysfs / f"devices/system/node/node{node}/numastat",
                    numastat_text(local, other))  # fmt: skip
