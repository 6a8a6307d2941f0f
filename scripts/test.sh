#!/usr/bin/env bash
# Runs every test: installs what the build needs, checks formatting, builds and tests the release
# configuration (every test), and builds (beside the release tests) and tests the sanitized scope
# under ASan + UBSan (the code that handles native memory and untrusted input, and the fuzzers:
# cmake/TesseraTests.cmake).
# No GPU is needed: the simulated driver built from this repo stands in for it. Prints each
# phase's time, then both suites' ctest summaries, the release suite's last.
# Usage: scripts/test.sh            (CI runs exactly this, through .ci/run)
set -euo pipefail
cd "$(dirname "$0")/.."

phases=()
phase_start=$SECONDS
end_phase() {  # name: records the time since the last phase ended
  phases+=("$(printf '%-28s %5d s' "$1" $((SECONDS - phase_start)))")
  phase_start=$SECONDS
}
print_phases() {
  echo "== phase times (docs/build.md)"
  printf '  %s\n' "${phases[@]}"
  printf '  %-28s %5d s\n' "total" "$SECONDS"
}
# ctest's closing lines: the pass/fail count and the total time.
summary_of() { sed -n '/tests passed\|tests failed out of/,$p' "$1"; }

./scripts/install-deps.sh
end_phase "install"

echo "== format check (clang-format)"
mapfile -t sources < <(git ls-files '*.cc' '*.h' '*.cu')
if ((${#sources[@]})); then
  clang-format --dry-run --Werror "${sources[@]}"
fi
end_phase "format check"

jobs=$(nproc)
run_suite() {  # preset: runs its tests into build/<preset>/ctest.log; on failure prints the log
  local log=build/$1/ctest.log
  if ! ctest --preset "$1" -j "$jobs" --timeout 300 >"$log" 2>&1; then
    cat "$log"
    print_phases
    exit 1
  fi
}

echo "== release build"
./scripts/build.sh release
end_phase "release build"

# The release suite mostly waits (agents, simulated kernels, child processes): the sanitizer build
# runs beside it at the lowest CPU priority, so the tests get the CPU whenever they want it.
echo "== release tests, and beside them the sanitizer build (build/asan-build.log)"
mkdir -p build
setsid nice -n 19 ./scripts/build.sh asan >build/asan-build.log 2>&1 &
sanitizer_build=$!  # its own process group: on a failure, the whole build is stopped
trap 'kill -- -"$sanitizer_build" 2>/dev/null || true' EXIT
if ! ctest --preset release -j "$jobs" --timeout 300 >build/release/ctest.log 2>&1; then
  cat build/release/ctest.log
  print_phases
  exit 1
fi
end_phase "release tests"
echo "== sanitizer build (address, undefined): the sanitized scope"
if ! wait "$sanitizer_build"; then
  cat build/asan-build.log
  print_phases
  exit 1
fi
trap - EXIT
end_phase "sanitizer build, the rest"
echo "== sanitizer tests"
run_suite asan
end_phase "sanitizer tests"

print_phases
echo "== sanitizer suite (build/asan/ctest.log)"
summary_of build/asan/ctest.log
echo "== release suite (build/release/ctest.log)"
summary_of build/release/ctest.log
