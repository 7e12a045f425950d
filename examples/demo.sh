#!/usr/bin/env bash
# `make demo`: what Topoplace does, on this machine, with no cluster: one screen per step, the
# full outputs in demo-out/ (each step names its files), and a summary at the end.
# 1. check the example policies; 2. mutate example training workloads offline; 3. one real
# AdmissionReview over HTTPS; 4. discover this machine, then a DGX H100; 5. explain where the
# flagship policy's pod fits in an example fleet, and where its GPU↔NIC promise holds;
# 6. a DRA policy's claims.
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=demo-out
rm -rf "${OUT}"
mkdir -p "${OUT}"
started=${SECONDS}
if [ -t 1 ]; then bold=$'\033[1m' off=$'\033[0m'; else bold='' off=''; fi

# step TITLE WHAT WHY: a heading, what the step shows and why it matters.
step() { printf '\n%s== %s ==%s\n%s\n%s\n\n' "${bold}" "$1" "${off}" "$2" "$3"; }
# Lines cut to the terminal's width, so a screen stays a screen.
fit() { cut -c1-"${COLUMNS:-120}"; }
# Warnings, the same one once with a count.
grouped() { sed 's/^warning: //' "$1" | sort | uniq -c | sort -rn | sed 's/^ *\([0-9]*\) /    \1 × /' | fit; }

step "1/6 Check the example policies (policies/*.yaml)" \
    "Shows: topoplace-webhook validate reads every PlacementPolicy and says what each gives a worker." \
    "Why: a platform engineer edits these files; a mistake is refused here, not at admission."
echo "  \$ topoplace-webhook validate policies/"
topoplace-webhook validate policies/ > "${OUT}/validate.txt" 2>&1
policies_ok=$(tail -n 1 "${OUT}/validate.txt")
echo "  ${policies_ok}"
echo "  $(grep -c '^note:' "${OUT}/validate.txt") notes (per GPU count: the CPUs and memory a worker gets; where GPU↔NIC pairs hold) → ${OUT}/validate.txt"

step "2/6 Mutate example workloads, offline, as the webhook would at admission" \
    "Shows: one label (topoplace.io/policy) turns a plain training pod into a placed one." \
    "Why: node affinity on the agent's labels, Guaranteed resources the kubelet can align, the dataset prefetched, torchrun bound to its NUMA node."
echo "  \$ topoplace-webhook mutate --policies policies/ examples/pods/FILE -n ml-team --output diff"
mutated=0
warnings=0
for pod in examples/pods/*.yaml; do
    name=$(basename "${pod}" .yaml)
    kind=$(sed -n 's/^kind: *//p' "${pod}" | head -n 1)
    policy=$(sed -n 's/.*topoplace.io\/policy: *\([a-z0-9-]*\).*/\1/p' "${pod}" | head -n 1)
    topoplace-webhook mutate --policies policies/ "${pod}" -n ml-team --output diff \
        > "${OUT}/mutate-${name}.diff" 2> "${OUT}/mutate-${name}.warnings"
    added=$(grep -c '^+[^+]' "${OUT}/mutate-${name}.diff" || true)
    count=$(wc -l < "${OUT}/mutate-${name}.warnings")
    mutated=$((mutated + 1))
    warnings=$((warnings + count))
    printf '  %-25s %-11s policy %-20s +%-4s lines, %s warning(s) → %s\n' \
        "${name}.yaml" "${kind}" "${policy}" "${added}" "${count}" "${OUT}/mutate-${name}.diff"
    if [ "${count}" -gt 0 ]; then grouped "${OUT}/mutate-${name}.warnings"; fi
done
echo
echo "  What the flagship policy ddp-hgx-full-node added to jobset-ddp.yaml (key lines):"
grep -E '^\+.*(topoplace.io/applied|--numa-binding|NCCL_NET|cpu:|memory:|rdma/ib|subPath|topoplace-prefetch|nodeSelectorTerms|key: topoplace.io/)' \
    "${OUT}/mutate-jobset-ddp.diff" | awk '!seen[$0]++' | head -n 14 | sed 's/^+ */    + /' | fit

step "3/6 The admission server over HTTPS: one real AdmissionReview v1 round trip" \
    "Shows: topoplace-webhook serve answers kube-apiserver's request with a JSONPatch." \
    "Why: this is what runs in the cluster; the offline mutate of step 2 is the same engine."
python examples/demo_serve.py --ops 4 > "${OUT}/admission.txt" 2>&1
grep -E '^(POST|HTTP|decoded)|"allowed"|^  \{"op"' "${OUT}/admission.txt" | fit
grep -q 'server exited 0' "${OUT}/admission.txt" && echo "SIGTERM: the server finished in-flight requests and exited 0"
echo "  (the whole exchange and the server's log → ${OUT}/admission.txt)"
ops=$(sed -n 's/^decoded patch (\([0-9]*\) ops.*/\1/p' "${OUT}/admission.txt")

step "4/6 Discover hardware as the node agent does: this machine, then a DGX H100" \
    "Shows: topoplace-agent discover reads sysfs (NUMA, PCIe switches, GPUs, RDMA NICs) into node labels." \
    "Why: the labels are the facts the webhook's node affinity asks for; nothing is typed in by hand."
topoplace-agent --log-level warning discover --output table > "${OUT}/discover-this-machine.txt"
echo "  This machine: $(sed -n 's/^  topoplace.io\///p' "${OUT}/discover-this-machine.txt" | tr '\n' ' ')" \
    | fold -s -w "${COLUMNS:-120}"
echo "  (→ ${OUT}/discover-this-machine.txt)"
fixture=$(mktemp -d)
trap 'rm -rf "${fixture}"' EXIT
python -c 'import sys, pathlib; from tests.agent.discovery.machines import build; build("dgx-h100", pathlib.Path(sys.argv[1]))' "${fixture}"
topoplace-agent discover --sysfs-root "${fixture}" --no-nvml --output table > "${OUT}/discover-dgx-h100.txt"
echo
echo "  A DGX H100 (a kernel-faithful sysfs tree from the tests): its labels, and each GPU's RDMA NIC"
sed -n '/^Labels:/,/^$/p' "${OUT}/discover-dgx-h100.txt" | sed '1d;/^$/d' | paste -d ' ' - - | sed 's/^/  /' | fit
awk '/^device/{p=1} p && /^(device|GPU)/' "${OUT}/discover-dgx-h100.txt" | sed 's/^/  /' | fit
echo "  (the GPU×NIC link matrix and every NIC → ${OUT}/discover-dgx-h100.txt)"

step "5/6 Why is my pod Pending? explain, node by node, on an example fleet" \
    "Shows: an 8-GPU DDP rank under ddp-hgx-full-node against twelve nodes (docs/examples/nodes.yaml); PAIRS: does each GPU get the NIC under its own switch." \
    "Why: the first failing check per node, in topology words, and whether the policy's GPU↔NIC promise holds where it fits."
echo "  \$ topoplace-webhook explain --policies policies/ --nodes docs/examples/nodes.yaml docs/examples/ddp-8gpu.yaml"
echo
topoplace-webhook explain --policies policies/ --nodes docs/examples/nodes.yaml \
    docs/examples/ddp-8gpu.yaml > "${OUT}/explain-ddp-8gpu.txt"
topoplace-webhook explain --policies policies/ --nodes docs/examples/nodes.yaml \
    docs/examples/ddp-8gpu.yaml --output json > "${OUT}/explain-ddp-8gpu.json"
sed '/^   [0-9]* × /d' "${OUT}/explain-ddp-8gpu.txt" | fit
echo "  (the reasons counted, and --output json → ${OUT}/explain-ddp-8gpu.txt, .json)"

step "6/6 A DRA policy: GPU limits become claims on ResourceClaimTemplates it keeps" \
    "Shows: with spec.dra, a worker's nvidia.com/gpu: N becomes a claim on a template that takes each GPU with a NIC on its PCIe root." \
    "Why: on Kubernetes DRA the pairs are the scheduler's to keep, on every node."
topoplace-webhook mutate --policies docs/examples/dra/policies docs/examples/dra/trainer-pod.yaml \
    --output diff > "${OUT}/dra-trainer-pod.diff" 2>&1
topoplace-webhook mutate --policies docs/examples/dra/policies docs/examples/dra/trainer-pod.yaml \
    --output templates > "${OUT}/dra-templates.yaml"
grep -E '^\+.*(resourceClaims|resourceClaimTemplateName|- name: gpu|claims:)' "${OUT}/dra-trainer-pod.diff" \
    | awk '!seen[$0]++' | head -n 8 | sed 's/^+ */    + /' | fit
templates=$(sed -n 's/^  name: \(topoplace-.*\)/\1/p' "${OUT}/dra-templates.yaml" | tr '\n' ' ')
echo "  templates: ${templates}→ ${OUT}/dra-templates.yaml"

python - "${OUT}" "${policies_ok}" "${mutated}" "${warnings}" "${ops:-?}" "${templates}" \
    "$((SECONDS - started))" "${bold}" "${off}" <<'PY'
import json, sys
from pathlib import Path
out, policies, mutated, warnings, ops, templates, took, bold, off = sys.argv[1:]
explained = json.loads((Path(out) / "explain-ddp-8gpu.json").read_text())
nodes = explained["nodes"]
fits = [n["node"] for n in nodes if n["fits"]]
pairs = [n["node"] for n in nodes if n["fits"] and (n.get("pairs") or {}).get("guaranteed")]
unpaired = [n for n in nodes if n["fits"] and not (n.get("pairs") or {}).get("guaranteed")]
print(f"\n{bold}== Summary =={off}")
print(f"  policies checked   {policies} (validate)")
print(f"  pods mutated       {mutated} example workloads, {warnings} warning(s); an AdmissionReview "
      f"over HTTPS answered with a {ops}-op JSONPatch")
print(f"  explain found      {explained['policy']}, 8 GPUs: {len(fits)} of {len(nodes)} nodes fit "
      f"({', '.join(fits)}); the others say why, one reason each")
print(f"  GPU↔NIC pairs      kept on {', '.join(pairs) or 'no node'}"
      + "".join(f"; not on {n['node']}: {n['pairs']['reason'].split('; pairs need')[0]}"
                for n in unpaired))
print(f"  DRA                claims on {templates.strip() or 'no template'}")
print(f"  full outputs       {out}/ ({len(list(Path(out).iterdir()))} files), in {took} s")
print("\nNext: docs/troubleshooting.md (explain on your cluster), docs/policies.md (write a "
      "policy), README.md (make cluster: the same on real kubelets).")
PY
