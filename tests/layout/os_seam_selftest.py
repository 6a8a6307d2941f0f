#!/usr/bin/env python3
"""The OS seam check must fail on a fixture tree whose source calls munmap, ::close, std::getenv
and reads environ outside the seam, naming the file, line and call of each; and pass on the same
tree without that file (the seam itself, qualified and member calls, declarations, comments and
strings naming those calls are allowed).

Usage: os_seam_selftest.py os_seam.py fixtures/os_seam"""
import os
import sys

from include_rules import selftest


def main():
    script, fixture = sys.argv[1], sys.argv[2]
    bad = "direct_calls.cc"
    seam = "go through the OS seam (os/)"
    return selftest(
        lambda tree: [sys.executable, script, "--src", os.path.join(tree, "src")],
        fixture,
        expected=[
            f"{bad}:9: munmap(): a direct OS call; {seam}",
            f"{bad}:10: close(): a direct OS call; {seam}",
            f"{bad}:14: getenv(): a direct OS call; {seam}",
            f"{bad}:15: environ: a direct OS call; {seam}",
            f"{bad}:20: clock_gettime(): a direct OS call; {seam}",
            "5 direct OS call(s) outside the seam",
        ],
        violations=[os.path.join("src", bad)])


if __name__ == "__main__":
    sys.exit(main())
