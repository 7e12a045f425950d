"""Policy hot reload the way the kubelet updates a ConfigMap volume, under live traffic."""

from __future__ import annotations

import asyncio
import os
import shutil
from collections import Counter
from pathlib import Path

import aiohttp
import jsonpatch

from tests.webhook.server.conftest import (
    POLICY_PROD_ONLY,
    TlsFiles,
    admission_review,
    ddp_policy,
    decode_patch,
    gpu_pod,
    post_review,
    server_config,
    wait_until,
)
from webhook.policy.loader import load_policy_dir
from webhook.server.runner import WebhookServer


class ConfigMapVolume:
    """Writes files as the kubelet's atomic writer does: a new `..<timestamp>` directory,
    a `..data_tmp` symlink renamed over `..data`, user-visible symlinks through `..data`,
    then the old timestamped directory removed."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self._generation = 0
        root.mkdir()

    def write(self, files: dict[str, str], *, finish: bool = True) -> None:
        """`finish=False` stops right after the `..data` swap, before the symlink cleanup."""
        self._generation += 1
        stamp = f"..2026_11_29_10_00_{self._generation:02d}.{4000000 + self._generation}"
        (self.root / stamp).mkdir()
        for name, text in files.items():
            (self.root / stamp / name).write_text(text)
        data = self.root / "..data"
        old = os.readlink(data) if data.is_symlink() else None
        os.symlink(stamp, self.root / "..data_tmp")
        os.rename(self.root / "..data_tmp", data)
        if not finish:
            return
        for name in files:
            if not (self.root / name).is_symlink():
                os.symlink(f"..data/{name}", self.root / name)
        for link in self.root.iterdir():
            if not link.name.startswith("..") and link.name not in files:
                link.unlink()
        if old is not None:
            shutil.rmtree(self.root / old)


# Version 1 defines `ddp` in a.yaml, version 2 in b.yaml. Reading a.yaml of one version and
# b.yaml of the other gives either no `ddp` at all or two of them: a half-loaded set shows.
V1 = {"a.yaml": ddp_policy(cpu=4, mark="v1"), "b.yaml": "# moved\n", "c.yaml": POLICY_PROD_ONLY}
V2 = {"a.yaml": "# moved\n", "b.yaml": ddp_policy(cpu=6, mark="v2"), "c.yaml": POLICY_PROD_ONLY}
BROKEN = {**V2, "b.yaml": ddp_policy(cpu=6, mark="v2") + "  bogusField: 1\n"}


def _policy_hash(tmp_path: Path, files: dict[str, str], name: str) -> str:
    plain = tmp_path / f"plain-{len(list(tmp_path.iterdir()))}"
    plain.mkdir()
    for file, text in files.items():
        (plain / file).write_text(text)
    return load_policy_dir(plain).hash_of(name)


def _state_of(answer: dict[str, object]) -> tuple[str, str, str]:
    """(cpu limit, MARK env, applied annotation) of the pod the answer's patch produces."""
    review = admission_review(gpu_pod(gpus=2))
    response = answer["response"]
    assert isinstance(response, dict)
    pod = jsonpatch.apply_patch(review["request"]["object"], decode_patch(response))
    trainer = pod["spec"]["containers"][0]
    mark = next(e["value"] for e in trainer["env"] if e["name"] == "MARK")
    return (
        trainer["resources"]["limits"]["cpu"],
        mark,
        pod["metadata"]["annotations"]["topoplace.io/applied"],
    )


async def _metric(client: aiohttp.ClientSession, server: WebhookServer, name: str) -> float:
    async with client.get(f"http://127.0.0.1:{server.metrics_port}/metrics") as resp:
        for line in (await resp.text()).splitlines():
            if line.startswith(name + " "):
                return float(line.split()[1])
    raise AssertionError(f"metric {name} not exported")


async def test_configmap_swaps_under_traffic_never_mix_sets(
    tmp_path: Path, tls_files: TlsFiles, client: aiohttp.ClientSession
) -> None:
    volume = ConfigMapVolume(tmp_path / "volume")
    volume.write(V1)
    expected = {
        ("8", "v1", f"ddp@{_policy_hash(tmp_path, V1, 'ddp')}"),
        ("12", "v2", f"ddp@{_policy_hash(tmp_path, V2, 'ddp')}"),
    }
    seen: Counter[tuple[str, str, str]] = Counter()
    stop = asyncio.Event()

    async with WebhookServer(server_config(volume.root, tls_files)) as server:

        async def traffic() -> None:
            while not stop.is_set():
                status, answer = await post_review(
                    client, server.url, admission_review(gpu_pod(gpus=2))
                )
                assert status == 200, answer
                assert "warnings" not in answer["response"], answer["response"]["warnings"]
                seen[_state_of(answer)] += 1

        _, answer = await post_review(client, server.url, admission_review(gpu_pod()))
        seen[_state_of(answer)] += 1  # the first version, before any swap
        workers = [asyncio.create_task(traffic()) for _ in range(6)]
        for version in (V2, V1, V2, V1, V2, V1, V2):
            await asyncio.sleep(0.2)
            volume.write(version)

        async def serving_v2() -> bool:
            _, answer = await post_review(client, server.url, admission_review(gpu_pod()))
            seen[_state_of(answer)] += 1
            return _state_of(answer)[1] == "v2"

        await wait_until(serving_v2, "the last update to be served")
        stop.set()
        await asyncio.gather(*workers)
        errors = await _metric(client, server, "topoplace_webhook_policy_reload_errors_total")

    assert set(seen) <= expected, f"mixed or unexpected policy states: {seen}"
    assert set(seen) == expected, "traffic should have seen both versions"
    assert errors == 0


async def test_broken_update_keeps_last_good_set(
    tmp_path: Path, tls_files: TlsFiles, client: aiohttp.ClientSession
) -> None:
    volume = ConfigMapVolume(tmp_path / "volume")
    volume.write(V1)
    async with WebhookServer(server_config(volume.root, tls_files)) as server:
        generation = "topoplace_webhook_policy_set_generation"
        assert await _metric(client, server, generation) == 1
        volume.write(BROKEN)

        async def refused() -> bool:
            return (
                await _metric(client, server, "topoplace_webhook_policy_reload_errors_total") == 1
            )

        await wait_until(refused, "the broken set to be refused")
        _, answer = await post_review(client, server.url, admission_review(gpu_pod()))
        assert _state_of(answer)[:2] == ("8", "v1")
        async with client.get(server.url.removesuffix("/mutate") + "/readyz") as resp:
            assert resp.status == 200
        # The same broken content is not counted again on every poll.
        await asyncio.sleep(0.3)
        assert await _metric(client, server, "topoplace_webhook_policy_reload_errors_total") == 1

        volume.write(V2)

        async def fixed() -> bool:
            _, answer = await post_review(client, server.url, admission_review(gpu_pod()))
            return _state_of(answer)[:2] == ("12", "v2")

        await wait_until(fixed, "the fixed set to be served")
        assert await _metric(client, server, generation) == 2


async def test_plain_directory_edit_reloads(
    policy_dir: Path, tls_files: TlsFiles, client: aiohttp.ClientSession
) -> None:
    async with WebhookServer(server_config(policy_dir, tls_files)) as server:
        (policy_dir / "ddp.yaml").write_text(ddp_policy(cpu=3, mark="edited"))

        async def edited() -> bool:
            _, answer = await post_review(client, server.url, admission_review(gpu_pod()))
            return _state_of(answer)[:2] == ("6", "edited")

        await wait_until(edited, "the edited policy to be served")


async def test_new_file_counts_as_soon_as_data_is_swapped(
    tmp_path: Path, tls_files: TlsFiles, client: aiohttp.ClientSession
) -> None:
    volume = ConfigMapVolume(tmp_path / "volume")
    volume.write(V1)
    async with WebhookServer(server_config(volume.root, tls_files)) as server:
        # The kubelet has swapped `..data` but not yet linked `extra.yaml` into the volume.
        volume.write(
            {**V1, "extra.yaml": ddp_policy().replace("name: ddp", "name: extra")}, finish=False
        )
        assert not (volume.root / "extra.yaml").exists()

        async def extra_served() -> bool:
            review = admission_review(gpu_pod(policy="extra"))
            _, answer = await post_review(client, server.url, review)
            return "patch" in answer["response"]

        await wait_until(extra_served, "the policy in the new file to be served")
