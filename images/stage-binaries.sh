#!/bin/sh
# Stages one image's files from a build folder into OUT, laid out as they go into the image:
#   node-agent: /usr/local/bin/{tessera-node-agent,tessera,memory-fill,compute-burn},
#               /opt/tessera/lib/{libvgpu.so,tessera-cdi-hook} (the chart's init container copies
#               them to the host's /usr/local/tessera/lib, which the agent's container mounts at
#               that same path, so the image keeps its copy elsewhere; the hook, run by the
#               container runtime on the host, links only glibc dynamically)
#   webhook:    /usr/local/bin/tessera-webhook
# plus every shared library the loader maps for them (ldd), at its canonical folder, so the image
# needs no package manager. The same script runs in the Dockerfiles' build stage (on what it just
# compiled) and on the host for the `runtime-prebuilt` target (on an existing build folder).
# POSIX sh: the build stage's base has dash.
# Usage: stage-binaries.sh node-agent|webhook BUILD_DIR OUT_DIR
set -eu
component=$1 build=$2 out=$3

case "$component" in
  node-agent)
    binaries="bin/tessera-node-agent bin/tessera samples/memory-fill samples/compute-burn"
    ;;
  webhook)
    binaries="bin/tessera-webhook"
    ;;
  *)
    echo "stage-binaries: unknown image '$component' (node-agent or webhook)" >&2
    exit 2
    ;;
esac

# The shared libraries of FILE, one path a line (the loader included; the vDSO has no path).
libraries_of() {
  ldd "$1" | sed -n -e 's/.*=> \(\/[^ ]*\) (0x.*/\1/p' -e 's/^[[:space:]]*\(\/[^ ]*\) (0x.*/\1/p'
}

# Copies FILE (following links: the image must hold the bytes) to OUT at DEST.
put() {
  mkdir -p "$out$(dirname "$2")"
  cp -L "$1" "$out$2"
}

mkdir -p "$out"
libs=$(mktemp)
trap 'rm -f "$libs"' EXIT
for binary in $binaries; do
  [ -x "$build/$binary" ] || {
    echo "stage-binaries: $build/$binary is missing (build it first)" >&2
    exit 1
  }
  put "$build/$binary" "/usr/local/bin/$(basename "$binary")"
  libraries_of "$build/$binary" >>"$libs"
done
if [ "$component" = node-agent ]; then
  put "$build/libvgpu/libvgpu.so" /opt/tessera/lib/libvgpu.so
  put "$build/bin/tessera-cdi-hook" /opt/tessera/lib/tessera-cdi-hook
fi
sort -u "$libs" | while read -r library; do
  # /lib/x86_64-linux-gnu/libc.so.6 goes to /usr/lib/x86_64-linux-gnu/libc.so.6 on a merged-/usr
  # system: the base image's /lib is a link to usr/lib, which a copied /lib folder would replace.
  put "$library" "$(cd "$(dirname "$library")" && pwd -P)/$(basename "$library")"
done
echo "stage-binaries: $component: $(find "$out" -type f | wc -l) files, $(du -sh "$out" | cut -f1)"
