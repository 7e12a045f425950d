"""torchrun forms: where --numa-binding goes, and where it must not go."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from webhook.engine.launcher import bind_numa

F = "--numa-binding=exclusive"

# (command, args) before -> (command, args) after; None = key absent.
FOUND: list[tuple[str, dict[str, Any], dict[str, Any]]] = [
    (
        "bare torchrun",
        {"command": ["torchrun", "--nnodes=2", "train.py"]},
        {"command": ["torchrun", F, "--nnodes=2", "train.py"]},
    ),
    (
        "path to torchrun, flags in args",
        {"command": ["/opt/conda/bin/torchrun"], "args": ["--nproc-per-node=8", "t.py"]},
        {"command": ["/opt/conda/bin/torchrun", F], "args": ["--nproc-per-node=8", "t.py"]},
    ),
    (
        "torchrun only in args",
        {"args": ["torchrun", "t.py"]},
        {"args": ["torchrun", F, "t.py"]},
    ),
    (
        "python -m torch.distributed.run",
        {"command": ["python", "-m", "torch.distributed.run", "t.py"]},
        {"command": ["python", "-m", "torch.distributed.run", F, "t.py"]},
    ),
    (
        "python3.11 -u -m torch.distributed.run in args",
        {"command": ["/usr/bin/python3.11"], "args": ["-u", "-m", "torch.distributed.run", "t"]},
        {"command": ["/usr/bin/python3.11"], "args": ["-u", "-m", "torch.distributed.run", F, "t"]},
    ),
    (
        "wrapper before torchrun",
        {"command": ["tini", "--", "torchrun", "t.py"]},
        {"command": ["tini", "--", "torchrun", F, "t.py"]},
    ),
    (
        "bash -c string",
        {"command": ["bash", "-c", "torchrun --nnodes=4 train.py"]},
        {"command": ["bash", "-c", f"torchrun {F} --nnodes=4 train.py"]},
    ),
    (
        "bash -xc with setup before and after",
        {"command": ["/bin/bash", "-xc", "pip install -e . && exec torchrun t.py; echo done"]},
        {"command": ["/bin/bash", "-xc", f"pip install -e . && exec torchrun {F} t.py; echo done"]},
    ),
    (
        "sh -c script in args",
        {"command": ["sh", "-c"], "args": ["cd /w\n/usr/local/bin/torchrun t.py"]},
        {"command": ["sh", "-c"], "args": [f"cd /w\n/usr/local/bin/torchrun {F} t.py"]},
    ),
    (
        "shell and -c both in args",
        {"command": ["bash"], "args": ["-ec", "python3 -m torch.distributed.run t.py"]},
        {"command": ["bash"], "args": ["-ec", f"python3 -m torch.distributed.run {F} t.py"]},
    ),
    (
        "bash -euo pipefail -c",
        {"command": ["bash", "-euo", "pipefail", "-c", "torchrun t.py"]},
        {"command": ["bash", "-euo", "pipefail", "-c", f"torchrun {F} t.py"]},
    ),
    (
        "env assignment before torchrun in a script",
        {"command": ["sh", "-lc", "NCCL_DEBUG=INFO torchrun t.py | tee log"]},
        {"command": ["sh", "-lc", f"NCCL_DEBUG=INFO torchrun {F} t.py | tee log"]},
    ),
    (
        "two launchers in one script",
        {"command": ["bash", "-c", "torchrun a.py && torchrun b.py"]},
        {"command": ["bash", "-c", f"torchrun {F} a.py && torchrun {F} b.py"]},
    ),
]

UNCHANGED: list[tuple[str, dict[str, Any]]] = [
    ("already bound (argv)", {"command": ["torchrun", "--numa-binding=node", "t.py"]}),
    ("already bound later", {"command": ["torchrun", "--nnodes=2", "--numa_binding", "node"]}),
    (
        "already bound across a line continuation",
        {"command": ["bash", "-c", "torchrun \\\n  --numa-binding=socket t.py"]},
    ),
]

NOT_FOUND: list[tuple[str, dict[str, Any]]] = [
    ("plain python", {"command": ["python", "train.py"]}),
    ("no command at all", {}),
    ("word containing torchrun", {"command": ["bash", "-c", "./my_torchrun_wrapper.sh"]}),
    ("torchrun inside another word", {"command": ["mytorchrun", "t.py"]}),
    ("torchrun only mentioned in a quoted string", {"command": ["sh", "-c", 'echo "torchrun"']}),
    ("python -m other module", {"command": ["python", "-m", "torch.distributed.launch", "t"]}),
]


@pytest.mark.parametrize(("before", "after"), [c[1:] for c in FOUND], ids=[c[0] for c in FOUND])
def test_flag_inserted_right_after_launcher(before, after):
    container = {"name": "c", **before}
    assert bind_numa(container, "exclusive") is True
    assert container == {"name": "c", **after}
    # Twice: never duplicated.
    assert bind_numa(container, "exclusive") is True
    assert container == {"name": "c", **after}


@pytest.mark.parametrize("before", [c[1] for c in UNCHANGED], ids=[c[0] for c in UNCHANGED])
def test_existing_binding_is_kept(before):
    container = {"name": "c", **before}
    assert bind_numa(container, "exclusive") is True
    assert container == {"name": "c", **before}


@pytest.mark.parametrize("before", [c[1] for c in NOT_FOUND], ids=[c[0] for c in NOT_FOUND])
def test_no_launcher_recognised(before):
    container = {"name": "c", **before}
    assert bind_numa(container, "exclusive") is False
    assert container == {"name": "c", **before}


_LAUNCHERS = ["torchrun", "/opt/venv/bin/torchrun", "python -m torch.distributed.run"]
_OTHER = ["cd /workspace", "pip install -e .", "echo start", "nvidia-smi", "sleep 1"]
_SEPARATORS = [" && ", "; ", "\n", " || "]


@st.composite
def shell_scripts(draw: st.DrawFn) -> tuple[str, int]:
    """A script of several commands, and how many of them start a launcher."""
    parts, launchers = [], 0
    for _ in range(draw(st.integers(1, 4))):
        if draw(st.booleans()):
            launchers += 1
            args = draw(st.sampled_from(["", " --nnodes=2", " --nproc-per-node=8 --standalone"]))
            parts.append(f"{draw(st.sampled_from(_LAUNCHERS))}{args} train.py")
        else:
            parts.append(draw(st.sampled_from(_OTHER)))
    script = parts[0]
    for part in parts[1:]:
        script += draw(st.sampled_from(_SEPARATORS)) + part
    return script, launchers


@settings(max_examples=60, deadline=None)
@given(case=shell_scripts(), shell=st.sampled_from([["bash", "-c"], ["sh", "-xc"]]))
def test_shell_scripts_get_one_flag_per_launcher(case, shell):
    script, launchers = case
    container = {"name": "c", "command": [*shell, script]}
    found = bind_numa(container, "exclusive")
    assert found == (launchers > 0)
    new_script = container["command"][2]
    assert new_script.count(F) == launchers
    assert new_script.replace(" " + F, "") == script
    for launcher in _LAUNCHERS:  # the flag sits right after a launcher, nowhere else
        new_script = new_script.replace(f"{launcher} {F}", "")
    assert F not in new_script
    again = {"name": "c", "command": list(container["command"])}
    bind_numa(again, "exclusive")
    assert again == container
