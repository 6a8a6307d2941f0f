#!/usr/bin/env bash
# Configures and builds one preset (default: release), or only the named targets of it.
# Usage: scripts/build.sh [preset [target...]]
set -euo pipefail
cd "$(dirname "$0")/.."
preset=${1:-release}
shift || true
export CUDACXX=${CUDACXX:-/usr/local/cuda/bin/nvcc}
export PATH=/usr/local/cuda/bin:$PATH
cmake --preset "$preset" -G Ninja >/dev/null
targets=()
for target in "$@"; do targets+=(--target "$target"); done
cmake --build --preset "$preset" -j "$(nproc)" "${targets[@]}"
