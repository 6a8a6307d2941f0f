#!/usr/bin/env bash
# The memory-quota checks that need a real GPU (issue: libvgpu memory quotas), as one prepared run:
# memory-fill through every allocation API under `tessera run --memory 8Gi`, then PyTorch (default
# allocator, expandable_segments, cudaMallocAsync) and CuPy under the same quota. Writes JSON lines
# under OUT_DIR; on a machine without a GPU it stops and says so (no result is made up).
# Usage: scripts/gpu-checks/memory-quota.sh OUT_DIR [BUILD_DIR]   (BUILD_DIR: a release build)
set -uo pipefail
out=${1:?usage: memory-quota.sh OUT_DIR [BUILD_DIR]}
build=${2:-build/release}
here=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$out"
if ! nvidia-smi -L >"$out/gpu.txt" 2>&1; then
  echo "memory-quota: no GPU here (nvidia-smi -L failed); nothing was measured" >&2
  exit 2
fi
tessera=$build/bin/tessera
limit=8Gi

for api in alloc pitch async pool vmm array; do
  "$tessera" run --memory "$limit" -- "$build/samples/memory-fill" --api "$api" --chunk 1Gi \
    >>"$out/memory-fill-quota.jsonl" 2>>"$out/memory-fill-quota.err"
done
# Managed memory counts against the quota (docs/libvgpu.md); --max keeps a real driver bounded.
"$tessera" run --memory "$limit" -- "$build/samples/memory-fill" --api managed --chunk 1Gi \
  --max 16Gi >>"$out/memory-fill-quota.jsonl" 2>>"$out/memory-fill-quota.err"
# The same through plain dlsym instead of cuGetProcAddress.
"$tessera" run --memory "$limit" -- "$build/samples/memory-fill" --api alloc --chunk 1Gi \
  --resolve dlsym >>"$out/memory-fill-quota.jsonl" 2>>"$out/memory-fill-quota.err"

python3 "$here/framework_quota.py" --tessera "$tessera" --limit "$limit" \
  >"$out/frameworks.jsonl" 2>"$out/frameworks.err"
echo "memory-quota: reports in $out"
