"""One real AdmissionReview v1 round trip over HTTPS against `topoplace-webhook serve`.

Starts `python -m webhook serve --self-signed --port 0` on the example policies, reads the
throwaway CA and the URL it prints, sends the pod template of an example workload as
kube-apiserver would (a Pod CREATE from a controller: generateName, no metadata.namespace),
prints the answer and the decoded JSONPatch, then stops the server with SIGTERM.

Run from anywhere: `python examples/demo_serve.py [--namespace NS] [--ops N]`.
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import selectors
import signal
import ssl
import subprocess
import sys
import tempfile
import time
import urllib.request
import uuid
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parent.parent
POLICY_LABEL = "topoplace.io/policy"


def _pod_templates(node: Any) -> list[dict[str, Any]]:
    """Every pod template (metadata + spec.containers) inside a workload, depth first."""
    found: list[dict[str, Any]] = []
    if isinstance(node, dict):
        spec = node.get("spec")
        if isinstance(spec, dict) and isinstance(spec.get("containers"), list):
            found.append(node)
        for value in node.values():
            found.extend(_pod_templates(value))
    elif isinstance(node, list):
        for value in node:
            found.extend(_pod_templates(value))
    return found


def example_pod(preferred: str) -> tuple[dict[str, Any], str]:
    """The first opted-in pod template in examples/pods/ (`preferred` file first), as the Pod
    a controller creates from it."""
    paths = sorted((REPO / "examples" / "pods").glob("*.yaml"), key=lambda p: p.name != preferred)
    for path in paths:
        for doc in yaml.safe_load_all(path.read_text()):
            for template in _pod_templates(doc):
                labels = (template.get("metadata") or {}).get("labels") or {}
                if POLICY_LABEL in labels:
                    owner = (doc.get("metadata") or {}).get("name", "demo")
                    pod = {
                        "apiVersion": "v1",
                        "kind": "Pod",
                        "metadata": {"generateName": f"{owner}-", "labels": labels},
                        "spec": template["spec"],
                    }
                    return pod, str(path.relative_to(REPO))
    raise SystemExit("demo_serve: no pod template with label topoplace.io/policy in examples/pods/")


def admission_review(pod: dict[str, Any], namespace: str) -> dict[str, Any]:
    gvk = {"group": "", "version": "v1", "kind": "Pod"}
    gvr = {"group": "", "version": "v1", "resource": "pods"}
    return {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": str(uuid.uuid4()),
            "kind": gvk,
            "resource": gvr,
            "requestKind": gvk,
            "requestResource": gvr,
            "namespace": namespace,
            "operation": "CREATE",
            "userInfo": {"username": "system:serviceaccount:kube-system:job-controller"},
            "object": pod,
            "oldObject": None,
            "dryRun": False,
            "options": {"kind": "CreateOptions", "apiVersion": "meta.k8s.io/v1"},
        },
    }


def _read_line(proc: subprocess.Popen[str], prefix: str, timeout: float = 30) -> str:
    assert proc.stdout is not None  # we asked for a pipe
    with selectors.DefaultSelector() as selector:
        selector.register(proc.stdout, selectors.EVENT_READ)
        deadline = time.monotonic() + timeout
        while selector.select(timeout=max(0.0, deadline - time.monotonic())):
            line = proc.stdout.readline()
            if not line:
                break
            if line.startswith(prefix):
                return line[len(prefix) :].strip()
    raise RuntimeError(f"the server printed no {prefix!r} line")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--namespace", default="ml-team")
    parser.add_argument("--ops", type=int, default=8, help="patch operations to show")
    parser.add_argument(
        "--example", default="jobset-ddp.yaml", help="file in examples/pods/ to take the pod from"
    )
    args = parser.parse_args()

    pod, source = example_pod(args.example)
    log = Path(tempfile.mkstemp(prefix="topoplace-demo-serve-", suffix=".log")[1])
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])),
    }
    command = [sys.executable, "-m", "webhook", "serve", "--self-signed", "--port", "0"]
    command += ["--metrics-port", "0", "--policies", str(REPO / "policies")]
    print("$", " ".join(["topoplace-webhook", *command[3:]]))
    with log.open("w") as stderr:
        proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=stderr, text=True, env=env)
    try:
        ca = _read_line(proc, "ca: ")
        url = _read_line(proc, "listening: ")
        print(f"server up at {url} (CA {ca})")
        review = admission_review(pod, args.namespace)
        print(f"\nPOST {url}: Pod CREATE from {source} in namespace {args.namespace!r}")
        request = urllib.request.Request(
            url, data=json.dumps(review).encode(), headers={"Content-Type": "application/json"}
        )
        context = ssl.create_default_context(cafile=ca)
        with urllib.request.urlopen(request, context=context, timeout=10) as resp:
            print(f"HTTP {resp.status} {resp.headers['Content-Type']}")
            answer = json.loads(resp.read())
        response = answer["response"]
        patch = json.loads(base64.b64decode(response["patch"])) if "patch" in response else []
        shown = {**response, "patch": f"<{len(response.get('patch', ''))} chars of base64>"}
        print(json.dumps({**answer, "response": shown}, indent=2))
        print(f"\ndecoded patch ({len(patch)} ops, first {min(args.ops, len(patch))}):")
        for op in patch[: args.ops]:
            print("  " + json.dumps(op)[:160])
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            status = proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            status = proc.wait()
    print(f"\nSIGTERM → server exited {status}; its log:")
    print("  " + log.read_text().strip().replace("\n", "\n  "))
    log.unlink()
    return 0 if status == 0 else 1


if __name__ == "__main__":
    raise SystemExit(main())
