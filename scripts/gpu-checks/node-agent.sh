#!/usr/bin/env bash
# The node-agent checks that need a real GPU (issue: node-agent), as one prepared run:
#  1. tessera-node-agent enumerates the GPUs through the real NVML and prints the ResourceSlice it
#     would publish (resource-slices.json), which must pass the port of kube-apiserver's
#     validation (agent_validate_slices: slices-validation.txt);
#  2. an MPS share (4Gi, 30 % of the threads) starts a real nvidia-cuda-mps-control daemon through
#     the agent's MPS backend, memory-fill and compute-burn run as its clients, the pinned-memory
#     limit is checked, and the daemon is stopped (mps.jsonl). Needs root (private /dev/shm).
# Writes under OUT_DIR; exits 1 when any expectation fails, saying which; 2 on a machine without a
# GPU (no result is made up).
# Usage: scripts/gpu-checks/node-agent.sh OUT_DIR [BUILD_DIR]   (BUILD_DIR: a release build)
set -euo pipefail
out=${1:?usage: node-agent.sh OUT_DIR [BUILD_DIR]}
build=${2:-build/release}
mkdir -p "$out"
if ! nvidia-smi -L >"$out/gpu.txt" 2>&1; then
  echo "node-agent: no GPU here (nvidia-smi -L failed); nothing was measured" >&2
  exit 2
fi
failed=()
if "$build/bin/tessera-node-agent" --print-resource-slices --node-name "$(hostname)" \
  >"$out/resource-slices.json" 2>"$out/resource-slices.err"; then
  # One published device per GPU that nvidia-smi lists, each with a memory capacity.
  python3 - "$out/resource-slices.json" "$(grep -c '^GPU ' "$out/gpu.txt")" <<'PY' ||
import json, sys
text, gpus = open(sys.argv[1]).read(), int(sys.argv[2])
decoder, slices, at = json.JSONDecoder(), [], 0
while text[at:].strip():
    at += len(text[at:]) - len(text[at:].lstrip())
    slice_, at = decoder.raw_decode(text, at)
    slices.append(slice_)
devices = [d for s in slices for d in s["spec"]["devices"]]
bad = [d["name"] for d in devices if "memory" not in d.get("capacity", {})]
print(f"node-agent: {len(devices)} devices published for {gpus} GPUs; without memory: {bad}")
sys.exit(0 if len(devices) == gpus and not bad else 1)
PY
    failed+=("resource slices do not list every GPU with its memory (resource-slices.json)")
  "$build/tests/node-agent/agent_validate_slices" "$out/resource-slices.json" \
    >"$out/slices-validation.txt" 2>&1 ||
    failed+=("kube-apiserver's validation refuses the slices (slices-validation.txt)")
else
  failed+=("--print-resource-slices exited non-zero (resource-slices.err)")
fi
if command -v nvidia-cuda-mps-control >/dev/null; then
  "$build/tests/node-agent/agent_mps_check" --control "$(command -v nvidia-cuda-mps-control)" \
    --root "$(mktemp -d /tmp/tessera-mps-check.XXXXXX)" \
    --memory-fill "$build/samples/memory-fill" --compute-burn "$build/samples/compute-burn" \
    >"$out/mps.jsonl" 2>"$out/mps.err" || failed+=("MPS share (mps.jsonl: a step with \"ok\":false)")
else
  echo "node-agent: nvidia-cuda-mps-control not found" | tee "$out/mps.err" >&2
  failed+=("MPS not checked: nvidia-cuda-mps-control not found")
fi
if ((${#failed[@]})); then
  printf 'node-agent: FAILED: %s\n' "${failed[@]}" >&2
  exit 1
fi
echo "node-agent: all expectations held; reports in $out"
