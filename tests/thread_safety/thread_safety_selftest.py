#!/usr/bin/env python3
"""The thread-safety check must reject fixtures/unguarded_access.cc (a GUARDED_BY member written
without its lock), naming the file, the line and clang's warning, and accept
fixtures/guarded_access.cc (the same class, locked), both with the agent's own compile flags.

Usage: thread_safety_selftest.py thread_safety_check.py fixtures <check's other arguments...>"""
import os
import subprocess
import sys


def run(script, fixture, args):
    done = subprocess.run([sys.executable, script, "--file", fixture] + args, capture_output=True,
                          text=True)
    return done.returncode, done.stdout + done.stderr


def main():
    script, fixtures, args = sys.argv[1], sys.argv[2], sys.argv[3:]
    wrong = os.path.join(fixtures, "unguarded_access.cc")
    right = os.path.join(fixtures, "guarded_access.cc")
    failures = []

    code, output = run(script, wrong, args)
    expected = [
        "unguarded_access.cc:10:28: error: writing variable 'count_' requires holding mutex "
        "'mutex_' exclusively [-Werror,-Wthread-safety-analysis]",
        "1 source(s), 1 failed",
    ]
    if code != 1:
        failures.append(f"the check exited {code} on {wrong}, not 1")
    for line in expected:
        if line not in output:
            failures.append(f"the check's output on {wrong} lacks: {line}")

    code, clean = run(script, right, args)
    if code != 0:
        failures.append(f"the check exited {code} on {right}, not 0:\n{clean}")

    if failures:
        print("\n".join(failures))
        print(f"-- output on {wrong}:\n{output}")
        return 1
    print(f"rejected {wrong} as expected:\n{output}accepted {right}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
