"""The answer cache's miss path in-process: what one "every pod different" admission costs
in Python, without TLS, HTTP or wrk around it (issue 36).

The admitter is the one `serve --node-cache --claim-template-cache` builds (app.build_app),
its node cache filled with the fleet bench_webhook's stand-in API server holds. Each request
is what the transport does with a body: parse the AdmissionReview bytes, admit, write the
answer's bytes. The DISTINCT_PODS pods of bench_webhook's row are sent in turn, more than
the answer cache keeps, so every request is a miss (checked after each pass).

    python -m benchmarks.webhook.profile_miss               # CPU µs per request, the floor, the top
    python -m benchmarks.webhook.profile_miss --against DIR # this tree vs the tree at DIR

Beside the miss path, passes interleaved with it: the floor (peers/floor.py), parsing the same
bodies with the same JSON library and writing the same answers' bytes (checked), and the
ratio of the two medians, each pass with the machine's load. The bench pods are one Job's
replicas: different pods of one form, so after the first the engine answers from the form's
recorded answer (webhook/engine/replay). A third kind of pass sends pods that are each a new form (a
variable renamed per pod: the engine runs every step for each), what a miss costs when
nothing is alike.

`--against` runs one child process per tree and alternates passes between them (this, DIR,
this, DIR…), so machine noise hits both alike; DIR is any copy of the repository (a git
worktree of another commit, a copy with compiled modules).
"""

from __future__ import annotations

import argparse
import cProfile
import gc
import os
import pstats
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from benchmarks.peers.floor import Given, given_of, load_average, respond
from benchmarks.webhook.bench_node_cache import fill_cache, fleet_objects
from benchmarks.webhook.bench_webhook import DISTINCT_PODS, FLEET_NODES
from benchmarks.webhook.servers import write_serving_pair
from benchmarks.webhook.workload import admission_review, worker_pod, write_policy_dir
from webhook import jsonio
from webhook.server.answer_cache import CachedAdmitter
from webhook.server.app import STATE, ServerConfig, build_app
from webhook.server.review import parse_review

__all__ = ["miss_path", "serve_config"]

_PASSES = 5
_TOP = 10
_REPO = Path(__file__).resolve().parents[2]

Answer = Callable[[bytes], bytes]


def serve_config(work: Path) -> ServerConfig:
    """`serve` as the benchmarks measure it: its caches on, metrics off, a key pair and the
    bench policy under `work`."""
    _ca, cert, key = write_serving_pair(work)
    return ServerConfig(
        policies_dir=write_policy_dir(work / "policies"),
        cert_path=cert,
        key_path=key,
        metrics_port=None,
        node_cache=True,
        claim_template_cache=True,
    )


def miss_path(work: Path) -> tuple[Answer, CachedAdmitter]:
    """The request path of `serve` as a function of the body, and its answer cache."""
    state = build_app(serve_config(work))[STATE]
    assert state.nodes is not None
    fill_cache(state.nodes, fleet_objects(FLEET_NODES))
    admitter = state.admitter
    cache = getattr(admitter, "pods", None)
    if not isinstance(cache, CachedAdmitter):
        raise RuntimeError(f"serve's pod admitter is not the answer cache: {cache!r}")

    def answer(body: bytes) -> bytes:
        admission = admitter.admit(parse_review(body))
        return admission.payload or jsonio.dumps(admission.review)

    return answer, cache


def _bodies(*, new_forms: bool = False) -> list[bytes]:
    # 4 GPUs, as bench_webhook's row: the pod fits some node, so the fit check runs whole.
    pods = [worker_pod(gpus=4, index=i) for i in range(DISTINCT_PODS)]
    if new_forms:
        for i, pod in enumerate(pods):
            pod["spec"]["containers"][0]["env"][0]["name"] = f"VAR_{i}"  # a name: in the form
    return [admission_review(pod) for pod in pods]


def _check(answer: Answer, cache: CachedAdmitter, body: bytes) -> None:
    response = jsonio.loads(answer(body))["response"]
    cache.clear()  # so the first pass misses on `body` too
    if response.get("allowed") is not True or "patch" not in response:
        raise RuntimeError(f"the bench pod was not mutated: {response}")
    if not any("GPU↔NIC pairs" in w for w in response.get("warnings", [])):
        raise RuntimeError(f"no fit verdict: the node cache is not in the path: {response}")


def _pass(answer: Answer, cache: CachedAdmitter, bodies: list[bytes]) -> float:
    """CPU µs per request over one pass of every body (CPU time, as bench_webhook's CPU
    column: other processes on the machine then cost little); each must have missed."""
    hits = cache.hits
    started = time.process_time()
    for body in bodies:
        answer(body)
    elapsed = time.process_time() - started
    if cache.hits != hits:
        raise RuntimeError(f"{cache.hits - hits} answer cache hits: this is not the miss path")
    return elapsed / len(bodies) * 1e6


def _givens(answer: Answer, bodies: list[bytes]) -> list[Given]:
    """The engine's answer for each body, and a check that the floor writes its bytes."""
    givens = []
    for body in bodies:
        written = answer(body)
        given = given_of(written)
        if respond(body, given) != written:
            raise RuntimeError(f"the floor does not write our answer: {written[:300]!r}")
        givens.append(given)
    return givens


def _floor_pass(bodies: list[bytes], givens: list[Given]) -> float:
    """CPU µs per request of the floor over one pass of the same bodies."""
    started = time.process_time()
    for body, given in zip(bodies, givens, strict=True):
        respond(body, given)
    return (time.process_time() - started) / len(bodies) * 1e6


def _against_floor(answer: Answer, cache: CachedAdmitter, bodies: list[bytes], passes: int) -> None:
    """Miss path, new-form and floor passes interleaved; medians, ratios, each pass's load."""
    givens = _givens(answer, bodies)  # also the warm-up of both
    new_forms = _bodies(new_forms=True)
    _pass(answer, cache, new_forms)
    gc.collect()
    miss: list[float] = []
    cold: list[float] = []
    floor: list[float] = []
    for _ in range(passes):
        miss.append(_pass(answer, cache, bodies))
        cold.append(_pass(answer, cache, new_forms))
        floor.append(_floor_pass(bodies, givens))
        print(
            f"  pass: miss {miss[-1]:.1f}, new form {cold[-1]:.1f}, floor {floor[-1]:.1f} µs"
            f"  ({load_average()})"
        )
    m, c, f = statistics.median(miss), statistics.median(cold), statistics.median(floor)
    print(f"miss path, every pod different (one Job's replicas): {m:.1f} CPU µs/request")
    print(f"miss path, every pod a new form: {c:.1f} CPU µs/request")
    print(f"floor (orjson parse + the same answer written): {f:.1f} CPU µs/request")
    print(f"  (medians of {passes} passes)")
    print(
        f"miss ÷ floor: {m / f:.2f} (goal ≤ 3); new form ÷ floor: {c / f:.2f}  ({load_average()})"
    )


def _top(stats: pstats.Stats, key: str) -> str:
    rows = sorted(stats.stats.items(), key=lambda kv: kv[1][3 if key == "cum" else 2])  # type: ignore[attr-defined]
    lines = [f"{'calls/req':>9} {'tot µs/req':>10} {'cum µs/req':>10}  function"]
    for (path, line, name), (_cc, calls, tot, cum, _callers) in reversed(rows[-_TOP:]):
        where = f"{Path(path).name}:{line}" if line else "~"
        per = DISTINCT_PODS / 1e6
        lines.append(
            f"{calls / DISTINCT_PODS:9.1f} {tot / per:10.1f} {cum / per:10.1f}  {where}({name})"
        )
    return "\n".join(lines)


def _profile(answer: Answer, bodies: list[bytes]) -> None:
    profiler = cProfile.Profile()
    profiler.enable()
    for body in bodies:
        answer(body)
    profiler.disable()
    stats = pstats.Stats(profiler)
    print(f"\ntop {_TOP} by cumulative time (one pass, under cProfile):\n{_top(stats, 'cum')}")
    print(f"\ntop {_TOP} by own time:\n{_top(stats, 'tot')}")


def _child() -> int:
    """One tree's side of `--against`: "ready", then one pass per line read."""
    with tempfile.TemporaryDirectory() as tmp:
        answer, cache = miss_path(Path(tmp))
        bodies = _bodies()
        _check(answer, cache, bodies[0])
        _pass(answer, cache, bodies)  # warm-up: caches of compiled regexes, replays, verdicts
        print("ready", flush=True)
        for _line in sys.stdin:
            print(f"{_pass(answer, cache, bodies):.2f}", flush=True)
    return 0


def _module_in(root: Path) -> str | None:
    """This module's name in the tree at `root`: where it is now, or where it was before the
    benchmarks were grouped (issue 46), so an older tree can still be compared."""
    for name in ("benchmarks.webhook.profile_miss", "benchmarks.profile_miss"):
        if (root / (name.replace(".", "/") + ".py")).is_file():
            return name
    return None


def _spawn(root: Path) -> subprocess.Popen[str]:
    env = {**os.environ, "PYTHONPATH": str(root)}
    child = subprocess.Popen(
        [sys.executable, "-m", str(_module_in(root)), "--child"],
        cwd=root,
        env=env,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert child.stdout is not None
    if child.stdout.readline().strip() != "ready":
        raise RuntimeError(f"the child in {root} did not start (exit {child.wait()})")
    return child


def _ask(child: subprocess.Popen[str]) -> float:
    assert child.stdin is not None and child.stdout is not None
    child.stdin.write("pass\n")
    child.stdin.flush()
    return float(child.stdout.readline())


def _against(other: Path, passes: int) -> int:
    trees = {"this": _REPO, "other": other.resolve()}
    children = {name: _spawn(root) for name, root in trees.items()}
    samples: dict[str, list[float]] = {name: [] for name in trees}
    try:
        for _ in range(passes):
            for name, child in children.items():
                samples[name].append(_ask(child))
    finally:
        for child in children.values():
            assert child.stdin is not None
            child.stdin.close()
            child.wait()
    medians = {name: statistics.median(values) for name, values in samples.items()}
    for name, root in trees.items():
        shown = " ".join(f"{v:.1f}" for v in samples[name])
        print(
            f"{name:5} median {medians[name]:6.1f}, min {min(samples[name]):6.1f} "
            f"CPU µs/request (passes: {shown})  {root}"
        )
    lows = {name: min(values) for name, values in samples.items()}
    print(
        f"this / other: {medians['this'] / medians['other']:.3f} (medians), "
        f"{lows['this'] / lows['other']:.3f} (minimums)"
    )
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.webhook.profile_miss", description=__doc__
    )
    parser.add_argument("--against", type=Path, metavar="DIR", help="another copy of the repo")
    parser.add_argument("--passes", type=int, default=_PASSES)
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        return _child()
    if args.against is not None:
        if _module_in(args.against) is None:
            parser.error(f"--against {args.against}: no benchmarks/webhook/profile_miss.py there")
        return _against(args.against, args.passes)
    with tempfile.TemporaryDirectory() as tmp:
        answer, cache = miss_path(Path(tmp))
        bodies = _bodies()
        _check(answer, cache, bodies[0])
        _against_floor(answer, cache, bodies, args.passes)
        _profile(answer, bodies)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
