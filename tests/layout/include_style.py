#!/usr/bin/env python3
"""Checks the one include style and the namespaces of the tree (docs/README.md, "Include style and
namespaces").

Include style: a quoted include names a header beside the including file by its bare name
(`"config.h"` only in config.cc's own folder), or spells the path from an include root: a public
`include/` folder (`"tessera/share_folder/snapshot.h"`), a component's folder or its `src/`
(`"core/config.h"` in simgpu, `"plugin/plugin_server.h"` in the agent), `tests/<component>/` or
`tests/support/` for test helpers. A name that resolves only from some other folder (a bare
`"simulator.h"` in simgpu/cuda/ that lives in simgpu/core/) is a violation: the reader cannot tell
where it lives. Includes found nowhere in the tree (system, generated) are not ours to check.

Namespaces: every top-level `namespace X {` of a product folder that the ```namespaces block lists
(the longest listed prefix of the file's path) must be one its line names, or nested in one (the
bare product root `tessera` matches only itself). A block that only forward-declares another
namespace's classes (`namespace CLI { class App; }`) is not checked.

Usage: include_style.py --rules docs/README.md --root .
Exit 0 when every include and namespace keeps to the rules, 1 with one line per violation."""
import argparse
import os
import re
import sys

from component_includes import SKIPPED, SOURCE_SUFFIXES, files_of, public_roots
from include_rules import includes, read_block, verdict

NAMESPACE = re.compile(r"^namespace\s+([A-Za-z_][\w:]*)\s*\{")
FORWARD = re.compile(r"^\s*(class|struct|enum class|enum)\s+\w+(\s*:\s*[\w:]+)?\s*;\s*(//.*)?$")
PRODUCT_ROOT = "tessera"


def roots_of(root, components):
    """Every include root of the tree, and {component: its own roots}."""
    own = {}
    public = []
    for component in components:
        base = os.path.join(root, component)
        folders = [base, os.path.join(base, "src"), os.path.join(root, "tests", component)]
        own[component] = [f for f in folders if os.path.isdir(f)]
        public += public_roots(root, component)
    support = os.path.join(root, "tests", "support")
    shared = public + ([support] if os.path.isdir(support) else [])
    return shared, own


def everywhere(root):
    """{file name: [folders that hold a file of that name]} over the tree's source folders."""
    found = {}
    for top, dirs, names in os.walk(root):
        dirs[:] = [d for d in dirs if d not in SKIPPED and not d.startswith(".")
                   and not (top == root and d in ("build", "Testing"))]
        for name in names:
            found.setdefault(name, []).append(top)
    return found


def resolves(folder, included):
    return os.path.isfile(os.path.join(folder, included))


def include_problems(root, components):
    shared, own = roots_of(root, components)
    names = everywhere(root)
    problems = []
    for component in components:
        folders = [os.path.join(root, component), os.path.join(root, "tests", component)]
        roots = shared + [r for c in components for r in own[c]]
        for folder in folders:
            if not os.path.isdir(folder):
                continue
            for path in files_of(folder):
                for number, included in includes(path):
                    if "/" not in included and resolves(os.path.dirname(path), included):
                        continue  # beside the including file, by its bare name
                    if any(resolves(r, included) for r in roots):
                        continue  # from an include root
                    base = os.path.basename(included)
                    holders = [h for h in names.get(base, [])
                               if os.path.isfile(os.path.join(h, base))
                               and os.path.join(h, base).endswith(os.sep + included)]
                    if not holders:
                        continue  # not ours: a system or generated header
                    # The one the compiler would find: the including component's own first.
                    mine = [os.path.realpath(f) + os.sep for f in folders]
                    holders.sort(key=lambda h: not any(
                        (os.path.realpath(h) + os.sep).startswith(m) for m in mine))
                    where = os.path.relpath(os.path.join(holders[0], base), root)
                    spelled = spelling(os.path.join(holders[0], base), roots)
                    hint = (f"spell it \"{spelled}\"" if spelled else
                            "move it under an include root")
                    problems.append(
                        f"{os.path.relpath(path, root)}:{number}: #include \"{included}\": found "
                        f"only as {where}, not beside the file nor from an include root; {hint}")
    return problems


def spelling(header, roots):
    """The shortest path of `header` from one of the roots, or None."""
    best = None
    for r in roots:
        prefix = r.rstrip(os.sep) + os.sep
        if header.startswith(prefix):
            rest = header[len(prefix):]
            if best is None or len(rest) < len(best):
                best = rest
    return best


def only_forward_declarations(lines, start):
    """True when the namespace block opened at lines[start] holds only forward declarations."""
    for line in lines[start + 1:]:
        stripped = line.strip()
        if stripped.startswith("}"):
            return True
        if not stripped or stripped.startswith("//"):
            continue
        if not FORWARD.match(line):
            return False
    return True


def allowed(namespace, listed):
    for name in listed:
        if namespace == name:
            return True
        if name != PRODUCT_ROOT and namespace.startswith(name + "::"):
            return True
    return False


def namespace_problems(rules_path, root):
    rules, lines = read_block(rules_path, "namespaces")
    problems = []
    for folder in sorted(rules):
        if not os.path.isdir(os.path.join(root, folder)):
            problems.append(f"{rules_path}: rule \"{lines[folder]}\" names {folder}, which is no "
                            f"folder")
    checked = set()
    for folder in sorted(rules, key=len, reverse=True):
        for path in files_of(os.path.join(root, folder)):
            if path in checked:
                continue  # a longer listed folder holds it
            checked.add(path)
            with open(path, encoding="utf-8", errors="replace") as text:
                source = text.read().splitlines()
            for number, line in enumerate(source, 1):
                match = NAMESPACE.match(line)
                if not match or allowed(match.group(1), rules[folder]):
                    continue
                if only_forward_declarations(source, number - 1):
                    continue
                problems.append(
                    f"{os.path.relpath(path, root)}:{number}: namespace {match.group(1)}: code of "
                    f"{folder} is declared in {' or '.join(sorted(rules[folder]))} (rule "
                    f"\"{lines[folder]}\" in {rules_path})")
    return problems


def check(rules_path, root):
    components_rules, _ = read_block(rules_path, "components")
    components = sorted(name for name in components_rules if "/" not in name)
    return include_problems(root, components) + namespace_problems(rules_path, root)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rules", required=True)
    parser.add_argument("--root", required=True)
    args = parser.parse_args()
    return verdict(check(args.rules, args.root),
                   f"include style and namespaces kept: {args.root} against {args.rules}")


if __name__ == "__main__":
    sys.exit(main())
