#!/usr/bin/env bash
# Configures and builds one preset (default: release). Usage: scripts/build.sh [preset]
set -euo pipefail
cd "$(dirname "$0")/.."
preset=${1:-release}
export CUDACXX=${CUDACXX:-/usr/local/cuda/bin/nvcc}
export PATH=/usr/local/cuda/bin:$PATH
cmake --preset "$preset" -G Ninja >/dev/null
cmake --build --preset "$preset" -j "$(nproc)"
