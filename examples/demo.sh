#!/usr/bin/env bash
# `make demo`: what Topoplace does, on this machine, with no cluster.
# 1. validate the example policies; 2. mutate example training workloads offline and show the
# diff and warnings; 3. run the real HTTPS admission server and send it one AdmissionReview;
# 4. discover this machine's hardware as the node agent would label it, then a DGX H100 fixture;
# 6. explain, node by node, where a pod fits in an example fleet; 7. a DRA policy's claims.
set -euo pipefail
cd "$(dirname "$0")/.."

section() { printf '\n\033[1m== %s ==\033[0m\n' "$*"; }

section "1. Validate the example policies (policies/*.yaml)"
topoplace-webhook validate policies/

for pod in examples/pods/*.yaml; do
    section "2. topoplace-webhook mutate --policies policies/ ${pod} --output diff"
    # Warnings go to stderr, the diff to stdout; show both in order.
    topoplace-webhook mutate --policies policies/ "${pod}" --namespace ml-team --output diff 2>&1
done

section "3. The admission server over HTTPS: one real AdmissionReview v1 round trip"
python examples/demo_serve.py

section "4. topoplace-agent discover --output table (this machine's /sys)"
topoplace-agent discover --output table

section "4b. The labels this node would get (JSON)"
topoplace-agent discover --output json | python -c 'import json,sys; print(json.dumps(json.load(sys.stdin)["labels"], indent=2))'

section "5. The same on a DGX H100 (a kernel-faithful sysfs fixture from the tests)"
fixture=$(mktemp -d)
trap 'rm -rf "${fixture}"' EXIT
python -c 'import sys; from tests.agent.discovery.machines import build; build("dgx-h100", __import__("pathlib").Path(sys.argv[1]))' "${fixture}"
topoplace-agent discover --sysfs-root "${fixture}" --no-nvml --output table

section "6. Why is my pod Pending? explain on an example fleet (docs/examples/nodes.yaml)"
# Exit 1 means no node fits; the demo fleet has nodes that do, so this exits 0.
topoplace-webhook explain --policies policies/ --nodes docs/examples/nodes.yaml docs/examples/ddp-8gpu.yaml

section "7. A DRA policy: GPU limits become claims on ResourceClaimTemplates it keeps"
topoplace-webhook mutate --policies docs/examples/dra/policies docs/examples/dra/trainer-pod.yaml \
    --output diff 2>&1
topoplace-webhook mutate --policies docs/examples/dra/policies docs/examples/dra/trainer-pod.yaml \
    --output templates
