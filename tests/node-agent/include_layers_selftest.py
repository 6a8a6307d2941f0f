#!/usr/bin/env python3
"""The layer check must fail, naming the file, the include and the rule, on a fixture tree where
low/ includes high/ and a folder has no rule; and pass on the same tree without those two.

Usage: include_layers_selftest.py include_layers.py layers_fixture"""
import os
import shutil
import subprocess
import sys
import tempfile


def run(script, fixture):
    return subprocess.run([sys.executable, script, "--readme", os.path.join(fixture, "README.md"),
                           "--src", os.path.join(fixture, "src")],
                          capture_output=True, text=True)


def main():
    script, fixture = sys.argv[1], sys.argv[2]
    failures = []
    broken = run(script, fixture)
    print(broken.stdout, end="")
    if broken.returncode == 0:
        failures.append("the fixture with violations passed")
    expected = [
        os.path.join("low", "reaches_up.h") + ":4: #include \"high/high.h\": low may not include "
        "high (rule \"low:\"",
        "folder stray has no rule",
    ]
    for text in expected:
        if text not in broken.stdout:
            failures.append(f"missing from the output: {text}")

    with tempfile.TemporaryDirectory() as scratch:
        clean = os.path.join(scratch, "fixture")
        shutil.copytree(fixture, clean)
        os.remove(os.path.join(clean, "src", "low", "reaches_up.h"))
        shutil.rmtree(os.path.join(clean, "src", "stray"))
        kept = run(script, clean)
        print(kept.stdout, end="")
        if kept.returncode != 0:
            failures.append("the fixture without violations failed")

    for failure in failures:
        print("FAIL: " + failure)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
