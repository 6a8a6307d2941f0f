#!/usr/bin/env bash
# The memory-quota checks that need a real GPU, as one prepared run: memory-fill through every
# allocation API under `tessera run --memory 8Gi` (each report checked by check_fill_reports.py),
# then PyTorch (default allocator, expandable_segments, cudaMallocAsync) and CuPy under the same
# quota (framework_quota.py). Writes JSON lines under OUT_DIR and exits 1 when any expectation
# fails, saying which; 2 when there is no GPU (no result is made up).
# With SIMGPU_LIB_DIR set, it runs on the simulated GPU instead (frameworks skipped): CI uses this
# to prove the verdicts themselves.
# Usage: scripts/gpu-checks/memory-quota.sh OUT_DIR [BUILD_DIR]   (BUILD_DIR: a release build)
set -euo pipefail
out=${1:?usage: memory-quota.sh OUT_DIR [BUILD_DIR]}
build=${2:-build/release}
limit=${TESSERA_CHECK_LIMIT:-8Gi}
context=${TESSERA_CHECK_CONTEXT:-500Mi}  # what the shim charges per context
here=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$out"
if [[ -n ${SIMGPU_LIB_DIR:-} ]]; then
  export LD_LIBRARY_PATH=$SIMGPU_LIB_DIR${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
  echo "simulated GPU from $SIMGPU_LIB_DIR" >"$out/gpu.txt"
elif ! nvidia-smi -L >"$out/gpu.txt" 2>&1; then
  echo "memory-quota: no GPU here (nvidia-smi -L failed); nothing was measured" >&2
  exit 2
fi
tessera=$build/bin/tessera
failed=()
: >"$out/memory-fill-quota.jsonl"
: >"$out/memory-fill-quota.err"

fill() {  # memory-fill arguments; a non-zero exit is a failure of its own
  if ! "$tessera" run --memory "$limit" -- "$build/samples/memory-fill" "$@" \
    >>"$out/memory-fill-quota.jsonl" 2>>"$out/memory-fill-quota.err"; then
    failed+=("memory-fill $* exited non-zero (see memory-fill-quota.err)")
  fi
}
runs=0
for api in alloc pitch async pool vmm array; do
  fill --api "$api" --chunk 1Gi
  runs=$((runs + 1))
done
# Managed memory counts against the quota (docs/libvgpu.md); --max keeps a real driver bounded.
fill --api managed --chunk 1Gi --max 16Gi
# The same through plain dlsym instead of cuGetProcAddress.
fill --api alloc --chunk 1Gi --resolve dlsym
runs=$((runs + 2))
python3 "$here/check_fill_reports.py" "$out/memory-fill-quota.jsonl" --limit "$limit" \
  --context "$context" --expect "$runs" | tee "$out/memory-fill-verdicts.txt" || failed+=("memory-fill verdicts")

if [[ -z ${SIMGPU_LIB_DIR:-} ]]; then
  python3 "$here/framework_quota.py" --tessera "$tessera" --limit "$limit" \
    >"$out/frameworks.jsonl" 2>"$out/frameworks.err" ||
    failed+=("frameworks (see frameworks.jsonl: a line with \"ok\": false)")
fi

if ((${#failed[@]})); then
  printf 'memory-quota: FAILED: %s\n' "${failed[@]}" >&2
  exit 1
fi
echo "memory-quota: all expectations held; reports in $out"
