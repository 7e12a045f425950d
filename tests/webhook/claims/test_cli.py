"""`topoplace-webhook claim-templates` as a process: kubeconfig, policy directory, probes."""

from __future__ import annotations

import asyncio
import json
import os
import sys
from pathlib import Path

import aiohttp
import yaml

from tests.webhook.claims.fake_apiserver import FakeApiServer, running
from tests.webhook.claims.test_reconciler import wait_until
from tests.webhook.engine.test_dra import dra_doc

REPO = Path(__file__).resolve().parents[3]


def kubeconfig(path: Path, url: str) -> Path:
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "fake", "cluster": {"server": url}}],
        "users": [{"name": "claims", "user": {"token": "test-token"}}],
        "contexts": [{"name": "fake", "context": {"cluster": "fake", "user": "claims"}}],
        "current-context": "fake",
    }
    path.write_text(json.dumps(config))
    return path


async def test_the_command_reconciles_reloads_policies_and_reports_ready(tmp_path: Path) -> None:
    policies = tmp_path / "policies"
    policies.mkdir()
    (policies / "dra.yaml").write_text(yaml.safe_dump(dra_doc("p")))
    fake = FakeApiServer()
    fake.add_namespace("ml-a")
    async with running(fake) as url:
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "webhook", "claim-templates",
            f"--policies={policies}", f"--kubeconfig={kubeconfig(tmp_path / 'kc', url)}",
            "--host=127.0.0.1", "--health-port=0", "--policy-poll-interval=0.2",
            stdout=asyncio.subprocess.PIPE,
            env={**os.environ, "PYTHONPATH": str(REPO)},
            cwd=REPO,
        )  # fmt: skip
        try:
            assert proc.stdout is not None
            line = (await asyncio.wait_for(proc.stdout.readline(), 30)).decode()
            assert line.startswith("health: "), line
            ready_url = line.split(" ", 1)[1].strip()
            await wait_until(
                lambda: len(fake.names("ml-a")) == 4, "the four templates (1, 2, 4, 8 GPUs)"
            )
            async with aiohttp.ClientSession() as http, http.get(ready_url) as response:
                assert response.status == 200
            # An edited policy file is picked up without a restart.
            (policies / "dra.yaml").write_text(
                yaml.safe_dump(dra_doc("p", dra={**dra_doc()["spec"]["dra"], "gpuCounts": [8]}))
            )
            await wait_until(
                lambda: fake.names("ml-a") == {"topoplace-p-8gpu"}, "only the 8-GPU template left"
            )
        finally:
            proc.terminate()
            await proc.wait()


async def test_invalid_policies_exit_2_with_the_message(tmp_path: Path) -> None:
    policies = tmp_path / "policies"
    policies.mkdir()
    doc = dra_doc("p")
    del doc["spec"]["namespaces"]
    (policies / "dra.yaml").write_text(yaml.safe_dump(doc))
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "webhook", "claim-templates", f"--policies={policies}",
        "--kubeconfig=/nonexistent",
        stderr=asyncio.subprocess.PIPE,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )  # fmt: skip
    _, err = await asyncio.wait_for(proc.communicate(), 30)
    assert proc.returncode == 2
    assert "spec.dra: a DRA policy must list spec.namespaces" in err.decode()
