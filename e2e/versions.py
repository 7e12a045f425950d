"""The cache directories e2e/versions.sh names (one per pinned version), read from the script
itself so that the builders and their users never disagree on a path."""

from __future__ import annotations

import subprocess
from pathlib import Path

__all__ = ["cache_dir"]

_SCRIPT = Path(__file__).resolve().with_name("versions.sh")


def cache_dir(function: str) -> Path:
    """What `function` (e2e_bin_dir, e2e_kueue_dir, e2e_helm_dir, …) of versions.sh prints."""
    out = subprocess.run(
        ["bash", "-c", f". {_SCRIPT} && {function}"],
        capture_output=True,
        text=True,
        check=True,
    )
    return Path(out.stdout.strip())
