#!/usr/bin/env python3
"""The layer check must fail, naming the file, the include and the rule, on a fixture tree where
low/ includes high/ and a folder has no rule; and pass on the same tree without those two.

Usage: agent_layers_selftest.py agent_layers.py fixtures/agent_layers"""
import os
import sys

from include_rules import selftest


def main():
    script, fixture = sys.argv[1], sys.argv[2]
    return selftest(
        lambda tree: [sys.executable, script, "--readme", os.path.join(tree, "README.md"),
                      "--src", os.path.join(tree, "src")],
        fixture,
        expected=[
            os.path.join("low", "reaches_up.h") + ":4: #include \"high/high.h\": low may not "
            "include high (rule \"low:\"",
            "folder stray has no rule",
        ],
        violations=[os.path.join("src", "low", "reaches_up.h"), os.path.join("src", "stray")])


if __name__ == "__main__":
    sys.exit(main())
