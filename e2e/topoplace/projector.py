"""Project a ConfigMap into a directory the way the kubelet does for a configMap volume.

The kubelet's atomic writer puts the files in a fresh hidden directory `..<timestamp>`, points
the `..data` symlink at it by renaming a new symlink over the old one, and keeps one symlink
per key (`key -> ..data/key`). A reader therefore sees the whole old set or the whole new set,
never half of each: this is the swap the webhook's policy reload is built for.

    python -m e2e.topoplace.projector --kubeconfig K --namespace NS --name CM --dir DIR

Lists, projects, then watches from the list's resourceVersion, and relists after an
expired watch or a dropped connection.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import os
import shutil
import time
from pathlib import Path

log = logging.getLogger("e2e.topoplace.projector")


def project(directory: Path, data: dict[str, str]) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    stamp = time.strftime("..%Y_%m_%d_%H_%M_%S.") + f"{time.monotonic_ns() % 10**9:09d}"
    target = directory / stamp
    target.mkdir()
    for key, value in data.items():
        (target / key).write_text(value)
    data_link = directory / "..data"
    old = os.readlink(data_link) if data_link.is_symlink() else None
    tmp = directory / "..data_tmp"
    with contextlib.suppress(FileNotFoundError):
        tmp.unlink()
    tmp.symlink_to(stamp)
    tmp.rename(data_link)  # the atomic swap
    for key in data:
        link = directory / key
        if not link.is_symlink():
            link.symlink_to(Path("..data") / key)
    for entry in directory.iterdir():
        if entry.is_symlink() and not entry.name.startswith("..") and entry.name not in data:
            entry.unlink()  # a key that is gone
    if old and old != stamp:
        shutil.rmtree(directory / old, ignore_errors=True)
    log.info("projected %d keys into %s (%s)", len(data), directory, stamp)


async def run(kubeconfig: Path, namespace: str, name: str, directory: Path) -> None:
    from kubernetes_asyncio import client, config, watch
    from kubernetes_asyncio.client.exceptions import ApiException

    cfg = client.Configuration()
    await config.load_kube_config(config_file=str(kubeconfig), client_configuration=cfg)
    async with client.ApiClient(cfg) as api:
        core = client.CoreV1Api(api)
        selector = f"metadata.name={name}"
        while True:
            try:
                listed = await core.list_namespaced_config_map(namespace, field_selector=selector)
                for cm in listed.items:
                    project(directory, dict(cm.data or {}))
                version = listed.metadata.resource_version
                async with watch.Watch().stream(
                    core.list_namespaced_config_map,
                    namespace,
                    field_selector=selector,
                    resource_version=version,
                    timeout_seconds=300,
                ) as stream:
                    async for event in stream:
                        if event["type"] in ("ADDED", "MODIFIED"):
                            project(directory, dict(event["object"].data or {}))
            except ApiException as exc:
                log.warning("watch ended (%s), relisting", exc.status)
                await asyncio.sleep(0.5)
            except (TimeoutError, OSError) as exc:
                log.warning("connection problem (%s), relisting", exc)
                await asyncio.sleep(1.0)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kubeconfig", type=Path, required=True)
    parser.add_argument("--namespace", required=True)
    parser.add_argument("--name", required=True)
    parser.add_argument("--dir", type=Path, required=True)
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    asyncio.run(run(args.kubeconfig, args.namespace, args.name, args.dir))


if __name__ == "__main__":
    main()
