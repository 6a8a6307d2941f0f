#!/usr/bin/env bash
# Runs a command whose outcome is known: it must exit with CODE, and each PATTERN (an extended
# regular expression) must match a line of its output. For tests where the exit status alone
# would not say enough; CTest's PASS_REGULAR_EXPRESSION would ignore the exit status.
# Usage: expect_exit.sh CODE [PATTERN...] -- COMMAND...
set -uo pipefail
code=$1
shift
patterns=()
while (($#)) && [[ $1 != -- ]]; do
  patterns+=("$1")
  shift
done
if [[ ${1:-} != -- || $# -lt 2 ]]; then
  echo "usage: expect_exit.sh CODE [PATTERN...] -- COMMAND..." >&2
  exit 2
fi
shift
output=$("$@" 2>&1)
status=$?
printf '%s\n' "$output"
failed=0
if [[ $status -ne $code ]]; then
  echo "expect_exit: exit status $status, expected $code" >&2
  failed=1
fi
for pattern in "${patterns[@]}"; do
  if ! grep -qE -- "$pattern" <<<"$output"; then
    echo "expect_exit: no line matches '$pattern'" >&2
    failed=1
  fi
done
((failed)) && exit 1
echo "expect_exit: exit status $code and every pattern seen"
