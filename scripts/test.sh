#!/usr/bin/env bash
# Runs every test: installs what the build needs, checks formatting, builds and tests the release
# configuration (every test), then builds and tests the sanitized scope under ASan + UBSan (the
# code that handles native memory and untrusted input, and the fuzzers: cmake/TesseraTests.cmake).
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
echo "== release tests"
run_suite release
end_phase "release tests"

echo "== sanitizer build (address, undefined): the sanitized scope"
./scripts/build.sh asan
end_phase "sanitizer build"
echo "== sanitizer tests"
run_suite asan
end_phase "sanitizer tests"

print_phases
echo "== sanitizer suite (build/asan/ctest.log)"
summary_of build/asan/ctest.log
echo "== release suite (build/release/ctest.log)"
summary_of build/release/ctest.log
