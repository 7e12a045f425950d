"""Memory: what importing each heavy dependency costs, measured in fresh interpreters.

Peak RSS of `serve` under load is measured by the webhook bench (same process it loaded);
the agent's steady-state RSS by the sync bench.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

__all__ = ["run_memory_bench"]

_REPO = Path(__file__).resolve().parent.parent
_PROBE = """
import sys
def rss():
    for line in open('/proc/self/status'):
        if line.startswith('VmRSS:'):
            return int(line.split()[1]) / 1024
before = rss()
for name in sys.argv[1:]:
    __import__(name)
print(before, rss())
"""

_IMPORTS = {
    "python alone": [],
    "kubernetes_asyncio (client + config)": [
        "kubernetes_asyncio.client",
        "kubernetes_asyncio.config",
    ],
    "aiohttp + prometheus_client": ["aiohttp.web", "prometheus_client"],
    "webhook server modules": ["webhook.server", "webhook.engine"],
    "agent sync modules": ["agent.sync_loop", "agent.discovery"],
}


def _import_cost(modules: list[str]) -> tuple[float, float]:
    out = subprocess.run(
        [sys.executable, "-c", _PROBE, *modules],
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, "PYTHONPATH": str(_REPO)},
    ).stdout.split()
    return float(out[0]), float(out[1])


def run_memory_bench() -> list[dict[str, Any]]:
    rows = []
    for label, modules in _IMPORTS.items():
        before, after = _import_cost(modules)
        rows.append(
            {
                "process": f"import {label}",
                "RSS MB": after,
                "import cost MB": after - before,
            }
        )
    return rows


if __name__ == "__main__":
    from benchmarks.table import markdown_table

    print(markdown_table(run_memory_bench()))
