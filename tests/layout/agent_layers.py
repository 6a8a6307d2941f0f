#!/usr/bin/env python3
"""Checks the layers of node-agent/src: every `#include "..."` of a file in folder F may name
only F itself or a folder that F's line in the README's ```layers block lists. Also fails on a
folder (or a file at the top of src) that no line names, and on a list with a cycle.

Usage: agent_layers.py --readme node-agent/README.md --src node-agent/src
Exit 0 when every include keeps to the rules, 1 with one line per violation otherwise."""
import argparse
import os
import sys

from include_rules import includes, read_block, verdict

SOURCE_SUFFIXES = (".h", ".hh", ".hpp", ".cc", ".cpp", ".c")


def cycle_in(rules):
    """A cycle of the rules as a list of folders, or None."""
    state = {}

    def visit(folder, path):
        state[folder] = "open"
        for below in sorted(rules.get(folder, ())):
            if state.get(below) == "open":
                return path[path.index(below):] + [below] if below in path else [folder, below]
            if below not in state:
                found = visit(below, path + [below])
                if found:
                    return found
        state[folder] = "done"
        return None

    for folder in sorted(rules):
        if folder not in state:
            found = visit(folder, [folder])
            if found:
                return found
    return None


def check(readme, src):
    rules, lines = read_block(readme, "layers")
    problems = []
    for folder, below in sorted(rules.items()):
        for name in sorted(below - set(rules)):
            problems.append(f"{readme}: rule \"{lines[folder]}\" names {name}, which has no rule")
    cycle = cycle_in(rules)
    if cycle:
        problems.append(f"{readme}: the layers have a cycle: {' -> '.join(cycle)}")
    folders = sorted(e for e in os.listdir(src) if os.path.isdir(os.path.join(src, e)))
    for entry in sorted(os.listdir(src)):
        if os.path.isfile(os.path.join(src, entry)):
            problems.append(f"{os.path.join(src, entry)}: a file at the top of src is in no layer")
    for folder in folders:
        if folder not in rules:
            problems.append(f"{os.path.join(src, folder)}: folder {folder} has no rule in {readme}")
    for folder in folders:
        allowed = rules.get(folder, set()) | {folder}
        for root, _, names in os.walk(os.path.join(src, folder)):
            for name in sorted(names):
                if not name.endswith(SOURCE_SUFFIXES):
                    continue
                path = os.path.join(root, name)
                for number, included in includes(path):
                    if "/" in included:
                        target = included.split("/", 1)[0]
                        if target not in folders:
                            continue  # not ours: "tessera/...", generated protos
                    elif os.path.exists(os.path.join(root, included)):
                        continue  # a header of the same folder, by name
                    else:
                        # A bare name from another folder of src (an include path to it).
                        owners = [f for f in folders
                                  if os.path.exists(os.path.join(src, f, included))]
                        if not owners:
                            continue
                        target = owners[0]
                    if target not in allowed:
                        rule = lines.get(folder, f"{folder}: (no rule)")
                        problems.append(
                            f"{path}:{number}: #include \"{included}\": {folder} may not include "
                            f"{target} (rule \"{rule}\" in {readme})")
    return problems


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--readme", required=True)
    parser.add_argument("--src", required=True)
    args = parser.parse_args()
    return verdict(check(args.readme, args.src),
                   f"layers kept: {args.src} against {args.readme}")


if __name__ == "__main__":
    sys.exit(main())
