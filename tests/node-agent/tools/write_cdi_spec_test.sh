#!/bin/sh
# agent_write_cdi_spec on a driver root laid out as simgpu/ builds it (libcuda.so.1 and
# libnvidia-ml.so.1 as files, no versioned names) with the built shim: the spec must mount those
# two under their own names, /etc/ld.so.preload naming the shim, set no LD_PRELOAD, declare 0.5.0;
# --unprepare must leave the CDI folder empty; a text file as the shim must fail naming it.
# Usage: write_cdi_spec_test.sh <agent_write_cdi_spec> <simgpu lib dir> <libvgpu.so>
set -eu
tool=$1 simgpu=$2 shim=$3
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
lib=$work/root/usr/lib/x86_64-linux-gnu
mkdir -p "$lib" "$work/root/dev"
cp "$simgpu/libcuda.so.1" "$simgpu/libnvidia-ml.so.1" "$lib/"
: > "$work/root/dev/nvidiactl"
run() {
  "$tool" --node-name node-a --state-dir "$work/state" --cdi-dir "$work/cdi" \
    --driver-root "$work/root" --toolkit-spec-dirs "$work/no-toolkit" "$@"
}
out=$(run --shim-path "$shim" --gpu-uuid GPU-00000000-0000-0000-0000-000000000000)
spec=$(printf '%s' "$out" | python3 -c 'import json,sys; print(json.load(sys.stdin)["spec"])')
python3 - "$spec" "$shim" "$work" <<'PY'
import json, sys
spec, shim, work = json.load(open(sys.argv[1])), sys.argv[2], sys.argv[3]
common = spec["containerEdits"]
mounts = {m["containerPath"]: m["hostPath"] for m in common["mounts"]}
lib = work + "/root/usr/lib/x86_64-linux-gnu"
assert spec["cdiVersion"] == "0.5.0", spec["cdiVersion"]
assert mounts[shim] == shim, mounts
assert open(mounts["/etc/ld.so.preload"]).read() == shim + "\n"
assert mounts["/usr/lib/x86_64-linux-gnu/libcuda.so.1"] == lib + "/libcuda.so.1", mounts
assert mounts["/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1"] == lib + "/libnvidia-ml.so.1", mounts
assert common["deviceNodes"] == [{"path": "/dev/nvidiactl", "hostPath": work + "/root/dev/nvidiactl"}]
for edits in [common] + [d["containerEdits"] for d in spec["devices"]]:
    assert not any(e.startswith("LD_PRELOAD=") for e in edits.get("env", [])), edits
print("spec ok:", sys.argv[1])
PY
run --shim-path "$shim" --unprepare
[ -z "$(ls -A "$work/cdi")" ] || { echo "unprepare left $(ls "$work/cdi")"; exit 1; }
echo "not a library" > "$work/fake.so"
if err=$(run --shim-path "$work/fake.so" 2>&1); then echo "accepted a text file as the shim"; exit 1; fi
case $err in
  *"shim $work/fake.so is not an ELF shared library"*) echo "refused: $err" | tail -1 ;;
  *) echo "unexpected error: $err"; exit 1 ;;
esac
