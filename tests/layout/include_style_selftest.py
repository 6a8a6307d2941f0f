#!/usr/bin/env python3
"""The include style and namespace check must fail on a fixture tree where a file names a header
of another folder by its bare name and a file declares one folder's code in another's namespace,
naming the file, line and include or namespace of each; and pass on the same tree without those two
files.

Usage: include_style_selftest.py include_style.py fixtures/include_style"""
import os
import sys

from include_rules import selftest


def main():
    script, fixture = sys.argv[1], sys.argv[2]
    return selftest(
        lambda tree: [sys.executable, script, "--rules", os.path.join(tree, "RULES.md"),
                      "--root", tree],
        fixture,
        expected=[
            os.path.join("app", "src", "cuda", "bare_across.cc") + ":2: #include \"config.h\": "
            "found only as " + os.path.join("app", "src", "core", "config.h") + ", not beside "
            "the file nor from an include root; spell it \"core/config.h\"",
            os.path.join("app", "src", "cuda", "wrong_namespace.cc") + ":3: namespace "
            "tessera::lib: code of app is declared in tessera::app (rule \"app: tessera::app\"",
            "2 include rule violation(s)",
        ],
        violations=[os.path.join("app", "src", "cuda", "bare_across.cc"),
                    os.path.join("app", "src", "cuda", "wrong_namespace.cc")])


if __name__ == "__main__":
    sys.exit(main())
