"""Is the scheduler a policy names running? Its leader-election Lease says.

kube-scheduler holds Lease `<resourceNamespace>/<resourceName>` while it runs (Topoplace's
`topoplace-numa-scheduler` keeps `kube-system/topoplace-numa-scheduler`, renewed every 2 s).
A scheduler is reported not running when its Lease is absent, or its renewTime is older than
three lease durations (clock skew between nodes is allowed for; a stopped scheduler stops
renewing). Admission never waits: `problem` answers from the last look, and a background
loop reads each named Lease (`get`, one namespace) every `interval` seconds. Until the first
look, or when the API cannot be read, nothing is said.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterable, Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Final

from common.backoff import Sleep
from webhook.kube_read import ApiError, read_json

__all__ = ["LEASE_NAMESPACE", "SchedulerLeases", "lease_problem"]

logger = logging.getLogger(__name__)

LEASE_NAMESPACE = "kube-system"  # kube-scheduler's default leaderElection.resourceNamespace
_STALE_LEASES = 3
_UNKNOWN: Final = object()  # not looked at yet, or could not be read


def lease_problem(name: str, lease: Mapping[str, Any] | None, now: datetime) -> str | None:
    """Why scheduler `name` is not running, from its Lease (None: absent), or None."""
    where = f"Lease {LEASE_NAMESPACE}/{name}"
    if lease is None:
        return f"scheduler {name!r} is not running (no {where})"
    spec = lease.get("spec") or {}
    renewed = spec.get("renewTime") or spec.get("acquireTime")
    duration = spec.get("leaseDurationSeconds") or 15
    try:
        when = datetime.fromisoformat(str(renewed).replace("Z", "+00:00"))
    except ValueError:
        return f"scheduler {name!r} is not running ({where} was never renewed)"
    age = (now - when).total_seconds()
    if age > _STALE_LEASES * float(duration):
        return f"scheduler {name!r} is not running ({where} last renewed {age:.0f}s ago)"
    return None


class SchedulerLeases:
    def __init__(
        self,
        names: Callable[[], Iterable[str]],
        *,
        interval: float = 10.0,
        sleep: Sleep = asyncio.sleep,
        clock: Callable[[], datetime] = lambda: datetime.now(UTC),
    ) -> None:
        self._names = names  # the schedulers the serving policies name
        self._interval = interval
        self._sleep = sleep
        self._clock = clock
        self.problems: dict[str, str | None] = {}  # name -> problem; absent: not looked yet
        self.generation = 0  # bumped whenever `problems` changes: cached answers compare it

    def problem(self, name: str) -> str | None:
        return self.problems.get(name)

    async def run(self, kubeconfig: Path | None = None) -> None:
        from kubernetes_asyncio import client

        from common.kube_config import load_configuration_until_ready

        cfg = await load_configuration_until_ready(
            kubeconfig, what="scheduler leases", sleep=self._sleep, next_delay=lambda: 5.0
        )
        async with client.ApiClient(cfg) as api:
            await self.follow(client.CoordinationV1Api(api))

    async def follow(self, coordination: Any) -> None:
        import aiohttp

        while True:
            for name in sorted(set(self._names())):
                try:
                    self._set(name, await self._look(coordination, name))
                except (ApiError, aiohttp.ClientError, TimeoutError, ValueError) as exc:
                    self._set(name, _UNKNOWN)  # cannot tell: say nothing
                    logger.warning(
                        "cannot read the scheduler's Lease",
                        extra={"scheduler": name, "error": str(exc) or type(exc).__name__},
                    )
            await self._sleep(self._interval)

    def _set(self, name: str, problem: str | object | None) -> None:
        if self.problems.get(name, _UNKNOWN) == problem:
            return
        if problem is _UNKNOWN:
            del self.problems[name]
        else:
            self.problems[name] = problem  # type: ignore[assignment]
        self.generation += 1

    async def _look(self, coordination: Any, name: str) -> str | None:
        try:
            lease = await read_json(
                await coordination.read_namespaced_lease(
                    name, LEASE_NAMESPACE, _preload_content=False, _request_timeout=10
                )
            )
        except ApiError as exc:
            if exc.status != 404:
                raise
            lease = None
        return lease_problem(name, lease, self._clock())
