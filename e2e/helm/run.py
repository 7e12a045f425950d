"""The Helm binary that `make e2e-bin` builds (e2e/build-helm.sh), and running it.

Helm keeps a cache, config and data directory; here they live in a directory the caller
chooses (the cluster's state, or a test's tmp_path), never in the user's home.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

from e2e.versions import cache_dir

__all__ = ["CHART", "Helm", "helm_binary"]

REPO = Path(__file__).resolve().parents[2]
CHART = REPO / "charts" / "topoplace"


def helm_binary() -> Path | None:
    """`helm` from the e2e cache for HELM_VERSION (e2e/versions.sh), else from PATH, else None."""
    cached = cache_dir("e2e_helm_dir") / "helm"
    if cached.is_file():
        return cached
    found = shutil.which("helm")
    return Path(found) if found else None


class Helm:
    """`helm ARGS...` with its own homes under `home`, and a kubeconfig when one is given."""

    def __init__(self, binary: Path, home: Path, kubeconfig: Path | None = None) -> None:
        self.binary = binary
        self.home = home
        self.kubeconfig = kubeconfig

    def env(self) -> dict[str, str]:
        env = {
            "PATH": "/usr/bin:/bin",
            "HOME": str(self.home),
            "HELM_CACHE_HOME": str(self.home / "cache"),
            "HELM_CONFIG_HOME": str(self.home / "config"),
            "HELM_DATA_HOME": str(self.home / "data"),
        }
        if self.kubeconfig is not None:
            env["KUBECONFIG"] = str(self.kubeconfig)
        return env

    def run(
        self, *args: str, check: bool = True, timeout: float = 180
    ) -> subprocess.CompletedProcess[str]:
        done = subprocess.run(
            [str(self.binary), *args],
            capture_output=True,
            text=True,
            env=self.env(),
            timeout=timeout,
        )
        if check and done.returncode != 0:
            raise RuntimeError(
                f"helm {' '.join(args)} failed ({done.returncode}):\n{done.stderr.strip()}"
            )
        return done

    def __call__(self, *args: str) -> str:
        return self.run(*args).stdout
