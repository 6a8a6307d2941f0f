#!/usr/bin/env python3
"""The component include check must fail on a fixture tree where a component includes another's
src/ and a component includes a public header its rule does not allow, naming the file, line and
include of each; and pass on the same tree without those two files.

Usage: component_includes_selftest.py component_includes.py fixtures/components"""
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
            os.path.join("upper", "src", "reaches_in.cc") + ":3: #include \"base_detail.h\": "
            "upper includes a private header of base (its src/)",
            os.path.join("other", "src", "other.cc") + ":2: #include \"base/api.h\": other may "
            "not include base (rule \"other:\"",
            "2 include rule violation(s)",
        ],
        violations=[os.path.join("upper", "src", "reaches_in.cc"),
                    os.path.join("other", "src", "other.cc")])


if __name__ == "__main__":
    sys.exit(main())
