"""Does this cluster keep gangs together itself? The Workload API and its gates, looked at.

At start and every `interval` seconds (an API server restart is the only way they change):
GET /apis/scheduling.k8s.io/v1beta1 (discovery, open to every authenticated client) for the
resources served, and GET /metrics on the API server for `kubernetes_feature_enabled`
(nonResourceURL /metrics, `get`: the one extra right the webhook's ClusterRole carries). The
API server's gates stand for the scheduler's and the controller manager's: a cluster turns a
gate on for all three. Admission never waits: `current` answers from the last look; until the
first answer, or when a read fails, each half is unknown and the webhook keeps today's
mechanisms. A change is logged once.
"""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path
from typing import Any, Final

from common.backoff import Sleep
from webhook.kube_read import ApiError, read_json
from webhook.workloads.gangs import GROUP_VERSION, WorkloadScheduling, parse_gates, parse_resources

__all__ = ["WorkloadApi", "look_once"]

logger = logging.getLogger(__name__)

# The API server's /metrics: 2.2 MB on an idle v1.37.2 one, more on a large cluster; the
# gate lines (kubernetes_*) sit near the end in name order, so the cap is generous.
_MAX_METRICS_BYTES: Final = 16 * 1024 * 1024


class WorkloadApi:
    def __init__(self, *, interval: float = 60.0, sleep: Sleep = asyncio.sleep) -> None:
        self._interval = interval
        self._sleep = sleep
        self.current = WorkloadScheduling()
        self.generation = 0  # bumped on every change: cached answers compare it

    async def run(self, kubeconfig: Path | None = None) -> None:
        from kubernetes_asyncio import client

        from common.kube_config import load_configuration_until_ready

        cfg = await load_configuration_until_ready(
            kubeconfig, what="workload API discovery", sleep=self._sleep, next_delay=lambda: 5.0
        )
        async with client.ApiClient(cfg) as api:
            await self.follow(api)

    async def follow(self, api: Any) -> None:
        while True:
            self.set(await look_once(api))
            await self._sleep(self._interval)

    def set(self, seen: WorkloadScheduling) -> None:
        if seen == self.current:
            return
        self.current = seen
        self.generation += 1
        logger.info("workload scheduling: %s", seen.describe())


async def look_once(api: Any) -> WorkloadScheduling:
    """One look (the `validate --kubeconfig` command's)."""
    return WorkloadScheduling(await _resources(api), await _gates(api))


async def _get(api: Any, path: str) -> Any:
    return await api.call_api(
        path,
        "GET",
        auth_settings=["BearerToken"],
        _preload_content=False,
        _request_timeout=10,
    )


async def _resources(api: Any) -> frozenset[str] | None:
    import aiohttp

    try:
        return parse_resources(await read_json(await _get(api, f"/apis/{GROUP_VERSION}")))
    except ApiError as exc:
        if exc.status == 404:
            return frozenset()  # the group/version is not served
        logger.warning("cannot read %s: %s", GROUP_VERSION, exc)
    except (aiohttp.ClientError, TimeoutError, ValueError) as exc:
        logger.warning("cannot read %s: %s", GROUP_VERSION, str(exc) or type(exc).__name__)
    return None


async def _gates(api: Any) -> dict[str, bool] | None:
    import aiohttp

    try:
        response = await _get(api, "/metrics")
        try:
            body = await _read_at_most(response, _MAX_METRICS_BYTES)
        finally:
            response.release()
        if response.status != 200:
            raise ApiError(response.status, body[:200].decode("utf-8", "replace"))
        gates = parse_gates(body.decode("utf-8", "replace"))
        if gates or len(body) < _MAX_METRICS_BYTES:
            return gates
        raise ApiError(0, f"no feature gate line in the first {_MAX_METRICS_BYTES} bytes")
    except (ApiError, aiohttp.ClientError, TimeoutError) as exc:
        logger.warning("cannot read the API server's feature gates from /metrics: %s", exc)
    return None


async def _read_at_most(response: Any, limit: int) -> bytes:
    """The body, or its first `limit` bytes (a read returns what has arrived, not all)."""
    chunks: list[bytes] = []
    size = 0
    async for chunk in response.content.iter_chunked(64 * 1024):
        chunks.append(chunk)
        size += len(chunk)
        if size >= limit:
            break
    return b"".join(chunks)[:limit]
