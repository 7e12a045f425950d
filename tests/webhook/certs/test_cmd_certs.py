"""`topoplace-webhook certs` against an in-process API server, through the real
kubernetes-asyncio client and a generated kubeconfig."""

from __future__ import annotations

import asyncio
import base64
import datetime as dt
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from cryptography import x509

from tests.manifests.fake_apiserver import FakeApiServer, running
from webhook.certs import bootstrap as cb
from webhook.certs.keys import make_ca, make_serving_cert
from webhook.certs.sync import CertSync, Settings
from webhook.cli.certs import api_client_for, run_loop

NS, SECRET, SERVICE, MWC = "topoplace-system", "topoplace-webhook-tls", "topoplace-webhook", "tp"
NAMES = cb.service_dns_names(SERVICE, NS)


def settings(out_dir: Path, *, once: bool = True) -> Settings:
    return Settings(
        namespace=NS,
        secret=SECRET,
        service=SERVICE,
        webhook_config=MWC,
        out_dir=out_dir,
        check_interval=300.0,
        renew_before=dt.timedelta(days=30),
        validity_days=365,
        once=once,
    )


def webhook_config(*names: str, bundle: str | None = None) -> dict[str, Any]:
    webhooks = []
    for name in names:
        client_config: dict[str, Any] = {
            "service": {"name": SERVICE, "namespace": NS, "path": "/mutate", "port": 443}
        }
        if bundle:
            client_config["caBundle"] = bundle
        webhooks.append(
            {
                "name": name,
                "clientConfig": client_config,
                "sideEffects": "None",
                "admissionReviewVersions": ["v1"],
            }
        )
    return {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "MutatingWebhookConfiguration",
        "metadata": {"name": MWC, "resourceVersion": "1"},
        "webhooks": webhooks,
    }


def stored_in(fake: FakeApiServer) -> cb.StoredMaterial:
    material = cb.parse_secret_data(fake.secrets[(NS, SECRET)]["data"])
    assert material is not None
    return material


def secret_with(material: cb.StoredMaterial) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": SECRET, "namespace": NS},
        "type": "kubernetes.io/tls",
        "data": cb.secret_data(material),
    }


async def one_pass(kubeconfig: Path, out_dir: Path) -> int:
    api = await api_client_for(kubeconfig)
    async with api:
        return await run_loop(CertSync(api, settings(out_dir)), settings(out_dir))


async def test_first_start_creates_the_secret_files_and_ca_bundle(tmp_path: Path) -> None:
    fake = FakeApiServer()
    fake.webhook_configs[MWC] = webhook_config("pods.topoplace.io")
    async with running(fake, tmp_path / "kubeconfig") as kubeconfig:
        assert await one_pass(kubeconfig, tmp_path / "tls") == 0

    material = stored_in(fake)
    assert fake.secrets[(NS, SECRET)]["type"] == "kubernetes.io/tls"
    assert (tmp_path / "tls" / "tls.crt").read_bytes() == material.serving.cert_pem
    assert (tmp_path / "tls" / "tls.key").read_bytes() == material.serving.key_pem
    bundle = fake.webhook_configs[MWC]["webhooks"][0]["clientConfig"]["caBundle"]
    assert base64.b64decode(bundle) == material.ca.cert_pem
    # the API server, trusting caBundle, accepts what serve presents for the Service name
    served = x509.load_pem_x509_certificate((tmp_path / "tls" / "tls.crt").read_bytes())
    served.verify_directly_issued_by(x509.load_pem_x509_certificate(base64.b64decode(bundle)))
    san = served.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert f"{SERVICE}.{NS}.svc" in san.get_values_for_type(x509.DNSName)


async def test_two_replicas_starting_together_share_one_pair(tmp_path: Path) -> None:
    fake = FakeApiServer()
    fake.webhook_configs[MWC] = webhook_config("pods.topoplace.io")
    # both replicas read "no secret" before either writes, so both try to create it
    fake.hold_secret_reads = 2
    async with running(fake, tmp_path / "kubeconfig") as kubeconfig:
        first = one_pass(kubeconfig, tmp_path / "a")
        second = one_pass(kubeconfig, tmp_path / "b")
        assert await asyncio.gather(first, second) == [0, 0]

    creates = [r for r in fake.requests if r[0] == "POST"]
    assert len(creates) == 2  # one won, one got 409 AlreadyExists
    assert len(fake.secrets) == 1
    material = stored_in(fake)
    for replica in ("a", "b"):
        assert (tmp_path / replica / "tls.crt").read_bytes() == material.serving.cert_pem
        assert (tmp_path / replica / "tls.key").read_bytes() == material.serving.key_pem


async def test_a_valid_secret_from_another_replica_is_used_without_writes(tmp_path: Path) -> None:
    existing = cb.issue(
        cb.assess(None, dns_names=NAMES, now=dt.datetime.now(dt.UTC), renew_before=dt.timedelta(1)),
        None,
        dns_names=NAMES,
        now=dt.datetime.now(dt.UTC),
        validity_days=365,
    )
    fake = FakeApiServer()
    fake.put_secret(secret_with(existing))
    bundle = base64.b64encode(existing.ca.cert_pem).decode()
    fake.webhook_configs[MWC] = webhook_config("pods.topoplace.io", bundle=bundle)
    async with running(fake, tmp_path / "kubeconfig") as kubeconfig:
        assert await one_pass(kubeconfig, tmp_path / "tls") == 0
    assert fake.writes() == []
    assert (tmp_path / "tls" / "tls.crt").read_bytes() == existing.serving.cert_pem


async def test_expiring_serving_cert_is_renewed_and_ca_bundle_left_alone(tmp_path: Path) -> None:
    ca = make_ca()
    old = cb.StoredMaterial(ca=ca, serving=make_serving_cert(ca, NAMES, days=10))
    fake = FakeApiServer()
    fake.put_secret(secret_with(old))
    bundle = base64.b64encode(ca.cert_pem).decode()
    fake.webhook_configs[MWC] = webhook_config("a.topoplace.io", "b.topoplace.io", bundle=bundle)
    async with running(fake, tmp_path / "kubeconfig") as kubeconfig:
        assert await one_pass(kubeconfig, tmp_path / "tls") == 0
    new = stored_in(fake)
    assert new.ca == ca
    assert new.serving != old.serving
    assert [m for m, _ in fake.writes()] == ["PUT"]  # no PATCH of the webhook config
    assert (tmp_path / "tls" / "tls.crt").read_bytes() == new.serving.cert_pem


async def test_conflicting_replace_rereads_and_adopts_the_winners_pair(tmp_path: Path) -> None:
    ca = make_ca()
    old = cb.StoredMaterial(ca=ca, serving=make_serving_cert(ca, NAMES, days=5))
    winner = cb.StoredMaterial(ca=ca, serving=make_serving_cert(ca, NAMES, days=365))
    fake = FakeApiServer()
    fake.put_secret(secret_with(old))
    fake.webhook_configs[MWC] = webhook_config("pods.topoplace.io")

    def other_replica_writes_first() -> None:
        fake.before_secret_write = None
        fake.put_secret(secret_with(winner))

    fake.before_secret_write = other_replica_writes_first
    async with running(fake, tmp_path / "kubeconfig") as kubeconfig:
        assert await one_pass(kubeconfig, tmp_path / "tls") == 0
    assert stored_in(fake) == winner
    assert (tmp_path / "tls" / "tls.crt").read_bytes() == winner.serving.cert_pem


async def test_only_stale_webhooks_are_patched_and_others_keep_their_fields(
    tmp_path: Path,
) -> None:
    fresh = cb.issue(
        cb.Decision(cb.Action.NEW_CA, "test"),
        None,
        dns_names=NAMES,
        now=dt.datetime.now(dt.UTC),
        validity_days=365,
    )
    fake = FakeApiServer()
    fake.put_secret(secret_with(fresh))
    good = base64.b64encode(fresh.ca.cert_pem).decode()
    config = webhook_config("a.topoplace.io", "b.topoplace.io", bundle=good)
    config["webhooks"][1]["clientConfig"]["caBundle"] = base64.b64encode(b"stale").decode()
    config["webhooks"][1]["timeoutSeconds"] = 5
    fake.webhook_configs[MWC] = config
    async with running(fake, tmp_path / "kubeconfig") as kubeconfig:
        assert await one_pass(kubeconfig, tmp_path / "tls") == 0
    patched = fake.webhook_configs[MWC]["webhooks"]
    assert [w["clientConfig"]["caBundle"] for w in patched] == [good, good]
    assert patched[1]["timeoutSeconds"] == 5
    assert patched[1]["clientConfig"]["service"]["path"] == "/mutate"


async def test_transient_api_errors_are_retried_with_backoff(tmp_path: Path) -> None:
    fake = FakeApiServer()
    fake.webhook_configs[MWC] = webhook_config("pods.topoplace.io")
    fake.fail_next = 2
    slept: list[float] = []

    async def no_sleep(seconds: float) -> None:
        slept.append(seconds)

    async with running(fake, tmp_path / "kubeconfig") as kubeconfig:
        api = await api_client_for(kubeconfig)
        async with api:
            s = settings(tmp_path / "tls")
            assert await run_loop(CertSync(api, s), s, sleep=no_sleep, rng=lambda: 1.0) == 0
    assert slept == [1.0, 2.0]
    assert (NS, SECRET) in fake.secrets


async def test_too_many_requests_waits_as_long_as_retry_after_says(tmp_path: Path) -> None:
    fake = FakeApiServer()
    fake.webhook_configs[MWC] = webhook_config("pods.topoplace.io")
    fake.fail_next, fake.fail_status, fake.fail_headers = 1, 429, {"Retry-After": "7"}
    slept: list[float] = []

    async def no_sleep(seconds: float) -> None:
        slept.append(seconds)

    async with running(fake, tmp_path / "kubeconfig") as kubeconfig:
        api = await api_client_for(kubeconfig)
        async with api:
            s = settings(tmp_path / "tls")
            assert await run_loop(CertSync(api, s), s, sleep=no_sleep, rng=lambda: 0.5) == 0
    assert slept == [7.0]


async def test_an_unusable_opaque_secret_is_replaced_in_place(tmp_path: Path) -> None:
    fake = FakeApiServer()
    fake.put_secret(
        {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": SECRET, "namespace": NS, "annotations": {"keep": "me"}},
            "type": "Opaque",
            "data": {"tls.crt": base64.b64encode(b"not a certificate").decode()},
        }
    )
    fake.webhook_configs[MWC] = webhook_config("pods.topoplace.io")
    async with running(fake, tmp_path / "kubeconfig") as kubeconfig:
        assert await one_pass(kubeconfig, tmp_path / "tls") == 0
    stored = fake.secrets[(NS, SECRET)]
    assert stored["type"] == "Opaque" and stored["metadata"]["annotations"] == {"keep": "me"}
    assert [m for m, _ in fake.writes()] == ["PUT", "PATCH"]
    assert (tmp_path / "tls" / "tls.crt").read_bytes() == stored_in(fake).serving.cert_pem


async def test_missing_webhook_config_fails_once_mode_without_crashing(tmp_path: Path) -> None:
    fake = FakeApiServer()  # no MutatingWebhookConfiguration at all
    slept: list[float] = []

    async def no_sleep(seconds: float) -> None:
        slept.append(seconds)

    async with running(fake, tmp_path / "kubeconfig") as kubeconfig:
        api = await api_client_for(kubeconfig)
        async with api:
            s = settings(tmp_path / "tls")
            assert await run_loop(CertSync(api, s), s, sleep=no_sleep) == 1
    assert len(slept) == 2  # two backoffs between three attempts
    # the serving pair was still made and handed to serve
    assert (tmp_path / "tls" / "tls.crt").exists()


async def test_cli_once_end_to_end(tmp_path: Path, repo_root: Path, python: str) -> None:
    fake = FakeApiServer()
    fake.webhook_configs[MWC] = webhook_config("pods.topoplace.io")
    async with running(fake, tmp_path / "kubeconfig") as kubeconfig:
        env = {k: v for k, v in os.environ.items() if k != "KUBERNETES_SERVICE_HOST"}
        env["PYTHONPATH"] = str(repo_root)
        env["KUBECONFIG"] = str(kubeconfig)
        # as in the Deployment, minus the in-cluster config
        proc = await asyncio.create_subprocess_exec(
            python,
            "-m",
            "webhook",
            "certs",
            f"--namespace={NS}",
            f"--secret={SECRET}",
            f"--service={SERVICE}",
            f"--webhook-config={MWC}",
            f"--out-dir={tmp_path / 'tls'}",
            "--once",
            env=env,
            stderr=asyncio.subprocess.PIPE,
        )
        _, err = await asyncio.wait_for(proc.communicate(), timeout=60)
    assert proc.returncode == 0, err.decode()
    assert (tmp_path / "tls" / "tls.crt").read_bytes() == stored_in(fake).serving.cert_pem
    assert b"wrote a new serving certificate" in err


def test_cli_rejects_a_renew_window_longer_than_validity(tmp_path: Path, repo_root: Path) -> None:
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "webhook",
            "certs",
            "--namespace=n",
            "--secret=s",
            "--service=s",
            "--webhook-config=w",
            f"--out-dir={tmp_path}",
            "--validity-days=20",
            "--once",
        ],
        env={**os.environ, "PYTHONPATH": str(repo_root)},
        capture_output=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 2
    assert b"--renew-before-days (30)" in proc.stderr
    assert list(tmp_path.iterdir()) == []
