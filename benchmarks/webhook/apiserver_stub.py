"""The API server the webhook's caches read during `make bench`'s wrk run.

The manifests ship `serve --node-cache --claim-template-cache`: the webhook lists and
watches Nodes and Topoplace's ResourceClaimTemplates. To measure that configuration without
a cluster, this serves both over HTTPS with a bearer token, from the test suite's stand-in
(tests/webhook/server/fake_nodes.py: paged lists, watches from a resourceVersion), holding
the example fleet's machine classes. Prints `kubeconfig: PATH` once serving, then
`listening: URL`; runs until SIGTERM.

    python -m benchmarks.webhook.apiserver_stub --nodes 60 --dir /tmp/work
"""

from __future__ import annotations

import argparse
import asyncio
import signal
from pathlib import Path

from aiohttp import web

from benchmarks.webhook.bench_node_cache import fleet_objects
from tests.agent.sync.fake_pods import PodStore
from tests.webhook.server.fake_nodes import NodeApiServer

__all__ = ["BenchApiServer"]

_TEMPLATES = "/apis/resource.k8s.io/v1/resourceclaimtemplates"


class BenchApiServer(NodeApiServer):
    """Nodes, plus an empty, watchable list of ResourceClaimTemplates."""

    def __init__(self, tmp_dir: Path) -> None:
        super().__init__(tmp_dir)
        self.templates = PodStore()

    def add_routes(self, app: web.Application) -> None:
        super().add_routes(app)
        app.router.add_get(_TEMPLATES, self._templates)

    async def _templates(self, request: web.Request) -> web.StreamResponse:
        return await self.templates.handle(request)


async def _serve(nodes: int, work: Path) -> None:
    async with BenchApiServer(work) as server:
        for node in fleet_objects(nodes):
            server.node_store.put(node)
        print(f"kubeconfig: {server.write_kubeconfig()}", flush=True)
        print(f"listening: {server.url}", flush=True)
        stop = asyncio.Event()
        asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
        await stop.wait()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--nodes", type=int, default=60)
    parser.add_argument("--dir", type=Path, required=True)
    args = parser.parse_args()
    asyncio.run(_serve(args.nodes, args.dir))


if __name__ == "__main__":
    main()
