#!/usr/bin/env bash
# Runs the samples on a real GPU and on the simulated one with the same arguments, and writes both
# reports side by side, so the simulator's fidelity can be compared (docs/simulator.md).
# Usage: scripts/fidelity.sh OUTPUT_DIR [BUILD_DIR]   (needs a built tree: scripts/build.sh release)
# On a machine without a GPU only the simulator's column is produced, and the script says so.
# Exits 1 when any run failed (naming each), so a check that did not run never reads as done.
set -euo pipefail
out=${1:?usage: scripts/fidelity.sh OUTPUT_DIR [BUILD_DIR]}
build=${2:-build/release}
samples=$build/samples
simulator_lib=$(cd "$build/simgpu/lib" && pwd)
mkdir -p "$out"

runs=()
failed=()
for api in alloc pitch async pool vmm array; do
  runs+=("memory-fill --api $api --chunk 4Gi")
done
runs+=("memory-fill --api managed --chunk 4Gi --max 8Gi")
for launch in kernel kernel-ex ptsz cooperative graph; do
  runs+=("compute-burn --launch $launch --seconds 3")
done

run_all() {  # label, then environment assignments for the runs
  local label=$1
  shift
  : >"$out/$label.jsonl"
  for run in "${runs[@]}"; do
    read -ra words <<<"$run"
    env "$@" "$samples/${words[0]}" "${words[@]:1}" >>"$out/$label.jsonl" 2>>"$out/$label.err" ||
      failed+=("$label: '$run' (see $out/$label.err)")
  done
  echo "fidelity: wrote $out/$label.jsonl"
}

if nvidia-smi -L >/dev/null 2>&1; then
  nvidia-smi -L >"$out/gpu.txt"
  run_all real-gpu
else
  echo "fidelity: no GPU here (nvidia-smi -L failed): only the simulator's reports are written" >&2
fi
state=$(mktemp -u /tmp/simgpu-fidelity.XXXXXX)
run_all simulator LD_LIBRARY_PATH="$simulator_lib" SIMGPU_STATE="$state" \
  SIMGPU_DEVICES="name=NVIDIA H200,memory=143771Mi,sms=132,cc=9.0" \
  SIMGPU_KERNEL_US=burn_fma=141,burn_fma_coop=1128
rm -f "$state"
if ((${#failed[@]})); then
  printf 'fidelity: FAILED: %s\n' "${failed[@]}" >&2
  exit 1
fi
