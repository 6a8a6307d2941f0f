#!/usr/bin/env bash
# The container check that needs a real GPU, as one prepared run: the agent's share manager
# prepares claims with the driver edits generated from this node's driver root (/), podman (runc)
# applies its CDI specs to a minimal image, and memory-fill inside the container must see the
# share's memory as the GPU's and stop exactly at the limit (agent_tests' ContainerRuntimeTest with
# TESSERA_REAL_DRIVER_ROOT, the same test CI runs against the simulated driver).
# Writes under OUT_DIR; exits 1 when any expectation fails, saying which; 2 on a machine without a
# GPU or without podman (nothing is made up).
# Usage: scripts/gpu-checks/container.sh OUT_DIR [BUILD_DIR]   (BUILD_DIR: a release build)
set -euo pipefail
out=${1:?usage: container.sh OUT_DIR [BUILD_DIR]}
build=${2:-build/release}
mkdir -p "$out"
if ! nvidia-smi -L >"$out/gpu.txt" 2>&1; then
  echo "container: no GPU here (nvidia-smi -L failed); nothing was measured" >&2
  exit 2
fi
if ! command -v podman >/dev/null || ! command -v runc >/dev/null; then
  echo "container: podman or runc is not installed here; nothing was measured" | tee "$out/container.txt" >&2
  exit 2
fi
# The real driver's libraries: unset any simulator settings, never the simulator's libcuda.
unset SIMGPU_STATE SIMGPU_DEVICES
if TESSERA_REAL_DRIVER_ROOT=/ "$build/tests/node-agent/agent_tests" \
  --gtest_filter='ContainerRuntimeTest.*' >"$out/container.txt" 2>&1; then
  grep -E '^\{"sample"|\[ +(OK|SKIPPED) +\]' "$out/container.txt" || true
  if grep -q "SKIPPED" "$out/container.txt" && ! grep -q "\[       OK \]" "$out/container.txt"; then
    echo "container: every test was skipped (container.txt)" >&2
    exit 2
  fi
  echo "container: all expectations held; report in $out/container.txt"
else
  grep -E 'Failure|Expected|Which is|FAILED' "$out/container.txt" | head -40 >&2
  echo "container: FAILED (container.txt)" >&2
  exit 1
fi
