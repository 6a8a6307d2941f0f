#!/usr/bin/env bash
# The slices `tessera-node-agent --print-resource-slices` prints for simulated nodes with the
# memory sizes of real GPUs (as NVML reports them) pass the port of kube-apiserver's validation,
# through the same validate-slices tool the real-GPU check uses (scripts/gpu-checks/node-agent.sh);
# and that tool refuses a slice the API server refuses.
# Usage: validate_printed_slices.sh AGENT VALIDATE_SLICES SIMGPU_LIB_DIR
set -euo pipefail
agent=$1 validate=$2 lib_dir=$3
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
gpu() { echo "name=$1,memory=$2,sms=$3,cc=$4"; }
nodes=(
  "$(gpu 'NVIDIA H200' 143771Mi 132 9.0)"
  "$(gpu 'NVIDIA H100 80GB HBM3' 81559Mi 132 9.0)"
  "$(gpu 'NVIDIA A100-SXM4-40GB' 40960Mi 108 8.0);$(gpu 'NVIDIA A100-SXM4-80GB' 81920Mi 108 8.0)"
  "$(gpu 'NVIDIA L40S' 46068Mi 142 8.9);$(gpu 'NVIDIA L4' 23034Mi 58 8.9);$(gpu 'Tesla T4' 15360Mi 40 7.5)"
)
for i in "${!nodes[@]}"; do
  SIMGPU_STATE="$work/state-$i" SIMGPU_DEVICES="${nodes[$i]}" LD_LIBRARY_PATH="$lib_dir" \
    "$agent" --print-resource-slices --node-name "node-$i" >"$work/slices-$i.json"
  "$validate" "$work/slices-$i.json"
done
# The request policy an earlier version published (step 256Mi) is refused with the API server's
# message, so a passing run above means something.
sed 's/"step": "1Mi"/"step": "256Mi"/' "$work/slices-0.json" >"$work/refused.json"
if "$validate" "$work/refused.json" >"$work/refused.txt"; then
  echo "validate-slices accepted a step that does not divide the H200's memory" >&2
  exit 1
fi
grep -q "value is not a multiple of a given step (256Mi)" "$work/refused.txt" || {
  cat "$work/refused.txt" >&2
  exit 1
}
echo "every printed slice passes; a 256Mi step is refused: $(cat "$work/refused.txt")"
