#!/usr/bin/env bash
# The first thing to run: installs what the build needs, builds Tessera, then lets two tenants share
# one GPU at the same time and shows what each got. Each tenant fills GPU memory and holds it while
# it runs a compute-bound kernel. With a real NVIDIA GPU present the samples run on it; otherwise
# the simulated driver built from this repo plays an H200 (same binaries, via LD_LIBRARY_PATH).
# Usage: scripts/demo.sh
set -euo pipefail
cd "$(dirname "$0")/.."

# ---- The tenants: one line each, "name|memory quota|cores quota (percent of GPU time)". Each
# tenant is one share: all its programs run under `tessera run` with the same share directory, so
# they draw on one quota together. An empty quota means that resource is not limited; a tenant
# with neither runs unconfined.
TENANTS=(
  "alice|40Gi|30"
  "bob|24Gi|70"
)
BURN_SECONDS=5    # each tenant's compute-burn runs this long
HOLD_SECONDS=3    # each tenant's memory-fill holds its memory this long, during the burns
FILL_CHUNK=4Gi    # memory-fill's first chunk size (it then halves down to 2 MiB)
# -----------------------------------------------------------------------------------------------

./scripts/install-deps.sh
# Only what the demo runs: the shim, the CLI, the simulated GPU and the samples (the tests are
# built by scripts/test.sh).
./scripts/build.sh release tessera libvgpu simgpu_cuda simgpu_nvml memory-fill compute-burn
samples=build/release/samples
simulator_lib=$PWD/build/release/simgpu/lib

workdir=$(mktemp -d -t tessera-demo.XXXXXX)
trap 'rm -rf "$workdir"' EXIT

# A real GPU counts only when nvidia-smi sees it and the real driver library loads (checked before
# the simulator's folder is put on the library path).
if nvidia-smi -L >/dev/null 2>&1 &&
  python3 -c 'import ctypes; ctypes.CDLL("libcuda.so.1")' >/dev/null 2>&1; then
  gpu_kind=real
else
  gpu_kind=simulated
  export LD_LIBRARY_PATH=$simulator_lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
  export SIMGPU_STATE=$workdir/simgpu.state  # a fresh simulated GPU for this demo
  export SIMGPU_KERNEL_US=burn_fma=141       # the burn kernel's wave time on a real H200
fi

echo
echo "demo: one compute-burn alone for 1 s (the reference for GPU shares)"
"$samples/compute-burn" --seconds 1 >"$workdir/alone.burn.json"

echo "demo: ${#TENANTS[@]} tenants side by side for ${BURN_SECONDS} s"
pids=()
names=()
start_tenant_program() {  # tenant suffix command...: runs it in the background, output to files
  local name=$1 suffix=$2
  shift 2
  "$@" >"$workdir/$name.$suffix.json" 2>"$workdir/$name.$suffix.err" &
  pids+=($!)
  names+=("$name $suffix")
}
# Every program starts now; the fills create their contexts at once but begin taking memory
# together a moment later, so no tenant's context is starved by another's fill.
fill_start=$(python3 -c 'import time; print(f"{time.time() + 1.5:.3f}")')
for tenant in "${TENANTS[@]}"; do
  IFS='|' read -r name memory cores <<<"$tenant"
  wrapper=()
  if [[ -n $memory || -n $cores ]]; then
    wrapper=(build/release/bin/tessera run --verbose --share-dir "$workdir/share-$name")
    [[ -n $memory ]] && wrapper+=(--memory "$memory")
    [[ -n $cores ]] && wrapper+=(--cores "$cores")
    wrapper+=(--)
  fi
  echo "demo: tenant $name runs under: ${wrapper[*]:-nothing (no quota)}"
  start_tenant_program "$name" burn "${wrapper[@]}" "$samples/compute-burn" --seconds "$BURN_SECONDS"
  start_tenant_program "$name" fill "${wrapper[@]}" "$samples/memory-fill" --chunk "$FILL_CHUNK" \
    --start-at "$fill_start" --hold-seconds "$HOLD_SECONDS"
done

# While the tenants run: what `tessera top` shows of their shares (one snapshot as plain lines;
# on a terminal `tessera top` is a live full-screen table).
top_args=()
for tenant in "${TENANTS[@]}"; do
  IFS='|' read -r name memory cores <<<"$tenant"
  [[ -n $memory || -n $cores ]] && top_args+=(--share-dir "$workdir/share-$name")
done
if ((${#top_args[@]})); then
  sleep 3  # the fills have taken their memory (they start 1.5 s in) and the burns are running
  echo "demo: tessera top --once, while they run:"
  build/release/bin/tessera top --once "${top_args[@]}" | sed 's/^/  /' || true
fi

failed=0
for i in "${!pids[@]}"; do
  if ! wait "${pids[$i]}"; then
    echo "demo: ${names[$i]} failed:" >&2
    cat "$workdir/${names[$i]// /.}.err" >&2
    failed=1
  fi
done
((failed == 0)) || exit 1

tenant_names=()
for tenant in "${TENANTS[@]}"; do tenant_names+=("${tenant%%|*}"); done

# What each share's shim counted (tessera run --verbose prints it when the burn ends).
for name in "${tenant_names[@]}"; do
  if grep -q "summary" "$workdir/$name.burn.err" 2>/dev/null; then
    echo "demo: $name's share, as its shim counted it:"
    sed -n 's/^tessera run: summary: /  /p' "$workdir/$name.burn.err"
  fi
done

python3 - "$workdir" "$gpu_kind" "$simulator_lib" "${tenant_names[@]}" <<'EOF'
import json
import sys

workdir, gpu_kind, simulator_lib, *tenants = sys.argv[1:]


def report(name):
    with open(f"{workdir}/{name}.json") as lines:
        return json.loads(lines.readline())


def gib(n):
    return f"{n / 2**30:.1f} GiB"


alone = report("alone.burn")
obtained = 0
rows = [("tenant", "GPU memory it sees", "memory obtained", "kernels/s", "share of GPU time",
         "p99 latency")]
total_share = 0.0
for tenant in tenants:
    fill, burn = report(f"{tenant}.fill"), report(f"{tenant}.burn")
    share = burn["kernels_per_s"] / alone["kernels_per_s"]
    total_share += share
    obtained += fill["bytes_obtained"]
    rows.append((tenant, gib(fill["mem_get_info_total"]), gib(fill["bytes_obtained"]),
                 f"{burn['kernels_per_s']:.0f}",
                 f"{share:.0%}", f"{burn['latency_us_p99'] / 1000:.2f} ms"))
rows.append(("(alone)", "-", "-", f"{alone['kernels_per_s']:.0f}", "100%",
             f"{alone['latency_us_p99'] / 1000:.2f} ms"))

print()
widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
for row in rows:
    print("  ".join([row[0].ljust(widths[0])] + [cell.rjust(w) for cell, w in zip(row[1:], widths[1:])]))
print()
print(f"Memory: each tenant sees its quota as the GPU's memory and obtains all of it but what its "
      f"contexts hold (libvgpu counts about 500 MiB per context); together {gib(obtained)}.")
print(f"Share of GPU time: a tenant's kernels/s over that of one burn alone; together "
      f"{total_share:.0%}.")
where = (f"the simulated driver ({simulator_lib})" if gpu_kind == "simulated"
         else "the real NVIDIA driver")
print(f"GPU: {gpu_kind} {alone['device']}, driver {alone['driver_version']}, through {where}.")
EOF
