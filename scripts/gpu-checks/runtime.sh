#!/usr/bin/env bash
# The CUDA runtime and NVIDIA's libraries on a real GPU, beside the simulator's figures: the same
# nvcc-built binaries CI runs on the simulated GPU (tests/libvgpu/runtime/, tests/libvgpu/libraries/,
# the runtime samples), bare and under `tessera run --memory 4Gi --cores 30`. Writes one JSON line
# per run under OUT_DIR (runtime.jsonl) and exits 1 when an expectation fails, saying which; 2 when
# there is no GPU (nothing is made up).
# Expectations: under the share the runtime reports the quota as the GPU (totalGlobalMem,
# cudaMemGetInfo total), cudaMalloc stops at cudaErrorMemoryAllocation within the quota, and each
# library runs from handle to destruction (cuBLAS's GEMM included, which the simulator cannot run).
# With SIMGPU_LIB_DIR set it runs on the simulated GPU instead: CI uses this to prove the verdicts;
# TESSERA_CHECK_QUOTA (bytes, default the 4 GiB given to the share) is what the reports must show.
# TESSERA_CHECK_ONLY=runtime-static (or -shared, -ptds) runs that probe's three runs alone, without
# the libraries and the samples: CI's broken-expectation run needs one failing run, not all of them
# (another value: exit 64, nothing run).
# Usage: scripts/gpu-checks/runtime.sh OUT_DIR [BUILD_DIR]   (BUILD_DIR: a release build)
set -euo pipefail
out=${1:?usage: runtime.sh OUT_DIR [BUILD_DIR]}
build=${2:-build/release}
build_kinds=(static shared ptds)
only=${TESSERA_CHECK_ONLY:-}
if [[ -n $only ]]; then
  case $only in
    runtime-static | runtime-shared | runtime-ptds) build_kinds=("${only#runtime-}") ;;
    *)
      echo "runtime: TESSERA_CHECK_ONLY is '$only': it must be runtime-static, runtime-shared or runtime-ptds" >&2
      exit 64
      ;;
  esac
fi
mkdir -p "$out"
if [[ -n ${SIMGPU_LIB_DIR:-} ]]; then
  export LD_LIBRARY_PATH=$SIMGPU_LIB_DIR:/usr/local/cuda/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
  echo "simulated GPU from $SIMGPU_LIB_DIR" >"$out/gpu.txt"
elif ! nvidia-smi -L >"$out/gpu.txt" 2>&1; then
  echo "runtime: no GPU here (nvidia-smi -L failed); nothing was measured" >&2
  exit 2
else
  unset SIMGPU_STATE SIMGPU_DEVICES
  export LD_LIBRARY_PATH=/usr/local/cuda/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
fi
programs=$build/tests/libvgpu/programs
share=("$build/bin/tessera" run --memory 4Gi --cores 30 --)
quota=${TESSERA_CHECK_QUOTA:-$((4 << 30))}
failed=()
: >"$out/runtime.jsonl"

record() {  # label command...: runs it, appends {"label":..., "report":...}; prints the report
  local label=$1 line
  shift
  line=$("$@" 2>>"$out/runtime.err" | grep '^{' | tail -1) || true
  [[ -n $line ]] || line='{"error":"no report"}'
  echo "{\"label\":\"$label\",\"report\":$line}" >>"$out/runtime.jsonl"
  echo "$line"
}
check() {  # label python-expression over `r` (the report)
  if ! python3 -c "import json,sys; r=json.loads(sys.argv[1]); sys.exit(0 if ($2) else 1)" "$3"; then
    failed+=("$1: $2 (report: $3)")
  fi
}

for build_kind in "${build_kinds[@]}"; do
  probe=$programs/runtime_probe_$build_kind
  r=$(record "runtime-$build_kind-bare-query" "$probe" query)
  check "runtime-$build_kind bare" "r.get('device_count', 0) >= 1" "$r"
  r=$(record "runtime-$build_kind-share-query" "${share[@]}" "$probe" query)
  check "runtime-$build_kind share" "r.get('total_global_mem') == $quota and r.get('total') == $quota" "$r"
  r=$(record "runtime-$build_kind-share-fill" "${share[@]}" "$probe" fill $((64 << 20)))
  check "runtime-$build_kind fill" "r.get('refusal') == 'cudaErrorMemoryAllocation' and 0 < r.get('obtained', 0) <= $quota" "$r"
done
libraries=(cublas curand cudnn "nccl 1")
launches=(chevron kernel-ex cooperative graph)
if [[ -n $only ]]; then libraries=() launches=(); fi
# cuBLAS's GEMM does not run on the simulator (docs/simulator.md): there its handle alone is run.
for library in "${libraries[@]}"; do
  # shellcheck disable=SC2086
  r=$(record "library-${library// /}-share" "${share[@]}" "$programs/library_probe" $library)
  check "library $library" "r.get('complete') is True and r.get('total') == $quota" "$r"
done
for launch in "${launches[@]}"; do
  record "compute-burn-runtime-$launch-share" "${share[@]}" "$build/samples/compute-burn-runtime" \
    --launch "$launch" --seconds 3 >/dev/null
done

if ((${#failed[@]})); then
  printf 'runtime: FAILED: %s\n' "${failed[@]}" >&2
  exit 1
fi
echo "runtime: all expectations held; reports in $out/runtime.jsonl"
