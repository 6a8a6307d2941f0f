#!/usr/bin/env python3
"""The component include check must fail on a fixture tree where a component includes another's
src/ and a component includes a public header its rule does not allow, naming the file, line and
include of each; and pass on the same tree without those two files.

Usage: component_includes_selftest.py component_includes.py fixture"""
import os
import shutil
import subprocess
import sys
import tempfile


def run(script, fixture):
    return subprocess.run([sys.executable, script, "--rules", os.path.join(fixture, "RULES.md"),
                           "--root", fixture], capture_output=True, text=True)


def main():
    script, fixture = sys.argv[1], sys.argv[2]
    failures = []
    broken = run(script, fixture)
    print(broken.stdout, end="")
    if broken.returncode != 1:
        failures.append(f"the fixture with violations exited {broken.returncode}, not 1")
    expected = [
        os.path.join("upper", "src", "reaches_in.cc") + ":3: #include \"base_detail.h\": upper "
        "includes a private header of base (its src/)",
        os.path.join("other", "src", "other.cc") + ":2: #include \"base/api.h\": other may not "
        "include base (rule \"other:\"",
        "2 include rule violation(s)",
    ]
    for text in expected:
        if text not in broken.stdout:
            failures.append(f"missing from the output: {text}")

    with tempfile.TemporaryDirectory() as scratch:
        clean = os.path.join(scratch, "fixture")
        shutil.copytree(fixture, clean)
        os.remove(os.path.join(clean, "upper", "src", "reaches_in.cc"))
        os.remove(os.path.join(clean, "other", "src", "other.cc"))
        kept = run(script, clean)
        print(kept.stdout, end="")
        if kept.returncode != 0:
            failures.append("the fixture without violations failed")

    for failure in failures:
        print("FAIL: " + failure)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
