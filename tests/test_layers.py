"""The package layers: imports run one way, as pyproject.toml's import-linter contracts say.

A back-edge (say, the engine importing the server, or the webhook importing the agent) fails
here with the import chain that breaks the contract.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tests.conftest import REPO_ROOT

LINT_IMPORTS = Path(sys.executable).with_name("lint-imports")  # import-linter's command


def test_imports_run_one_way() -> None:
    done = subprocess.run(
        [str(LINT_IMPORTS)], cwd=REPO_ROOT, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "0 broken" in done.stdout, done.stdout
