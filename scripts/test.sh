#!/usr/bin/env bash
# Runs every test: installs what the build needs, checks formatting, builds and tests the
# sanitizer configuration (ASan + UBSan), then builds and tests the release configuration.
# No GPU is needed: the simulated driver built from this repo stands in for it.
# Usage: scripts/test.sh            (CI runs exactly this, through .ci/run)
set -euo pipefail
cd "$(dirname "$0")/.."

./scripts/install-deps.sh

echo "== format check (clang-format)"
mapfile -t sources < <(git ls-files '*.cc' '*.h' '*.cu')
if ((${#sources[@]})); then
  clang-format --dry-run --Werror "${sources[@]}"
fi

jobs=$(nproc)
echo "== sanitizer build (address, undefined) and its tests"
./scripts/build.sh asan
ctest --preset asan -j "$jobs" --timeout 300 >build/asan/ctest.log 2>&1 || {
  cat build/asan/ctest.log
  exit 1
}
grep -E "tests passed" build/asan/ctest.log

echo "== release build and its tests"
./scripts/build.sh release
exec ctest --preset release -j "$jobs" --timeout 300
