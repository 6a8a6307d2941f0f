#!/usr/bin/env bash
# The node-agent checks that need a real GPU (issue: node-agent), as one prepared run:
#  1. tessera-node-agent enumerates the GPUs through the real NVML and prints the ResourceSlice it
#     would publish (resource-slices.json);
#  2. an MPS share (4Gi, 30 % of the threads) starts a real nvidia-cuda-mps-control daemon through
#     the agent's MPS backend, memory-fill and compute-burn run as its clients, the pinned-memory
#     limit is checked, and the daemon is stopped (mps.jsonl). Needs root (private /dev/shm).
# Writes under OUT_DIR; on a machine without a GPU it stops and says so (no result is made up).
# Usage: scripts/gpu-checks/node-agent.sh OUT_DIR [BUILD_DIR]   (BUILD_DIR: a release build)
set -uo pipefail
out=${1:?usage: node-agent.sh OUT_DIR [BUILD_DIR]}
build=${2:-build/release}
mkdir -p "$out"
if ! nvidia-smi -L >"$out/gpu.txt" 2>&1; then
  echo "node-agent: no GPU here (nvidia-smi -L failed); nothing was measured" >&2
  exit 2
fi
status=0
"$build/bin/tessera-node-agent" --print-resource-slices --node-name "$(hostname)" \
  >"$out/resource-slices.json" 2>"$out/resource-slices.err" || status=1
if command -v nvidia-cuda-mps-control >/dev/null; then
  "$build/tests/node-agent/agent_mps_check" --control "$(command -v nvidia-cuda-mps-control)" \
    --root "$(mktemp -d /tmp/tessera-mps-check.XXXXXX)" \
    --memory-fill "$build/samples/memory-fill" --compute-burn "$build/samples/compute-burn" \
    >"$out/mps.jsonl" 2>"$out/mps.err" || status=1
else
  echo "node-agent: nvidia-cuda-mps-control not found; MPS not checked" | tee "$out/mps.err" >&2
  status=1
fi
echo "node-agent: reports in $out (status $status)"
exit $status
