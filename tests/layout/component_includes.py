#!/usr/bin/env python3
"""Checks which component may include what, over the whole tree.

Every `#include "..."` of a component's files (common, proto, simgpu, libvgpu, samples, cli,
node-agent, webhook, and their tests under tests/<component>/) is resolved as the compiler would:
beside the including file, then in every component's include folders. A header found in another
component's `include/` folder (the public headers: `common/include`, `common/*/include`,
`libvgpu/include`, ...) is allowed when the ```components block of the rules file lets the
including component use that component. A header found only in another component's private folders
(`src/`, the folder itself) is never allowed: no component includes another component's src/. Tests
of a component may also include that component's private headers, tests/support/ and their own
folder, plus the components their own rule line (`tests/<component>: ...`) names.

Usage: component_includes.py --rules docs/README.md --root .
Exit 0 when every include keeps to the rules, 1 with one line per violation otherwise."""
import argparse
import os
import sys

from include_rules import includes, read_block, verdict

SOURCE_SUFFIXES = (".h", ".hh", ".hpp", ".cc", ".cpp", ".c", ".cu", ".def")
# Folders of a component that hold no code of its own (build products, manifests, data).
SKIPPED = {"build", "k8s", "fuzz_corpus", "golden", "fixtures", "doubles"}


def public_roots(root, component):
    """The include folders of a component: <component>/include and <component>/*/include."""
    base = os.path.join(root, component)
    roots = [os.path.join(base, "include")]
    for entry in sorted(os.listdir(base)):
        roots.append(os.path.join(base, entry, "include"))
    return [r for r in roots if os.path.isdir(r)]


def subfolders(folder):
    if not os.path.isdir(folder):
        return []
    return [os.path.join(folder, e) for e in sorted(os.listdir(folder))
            if os.path.isdir(os.path.join(folder, e)) and e != "include"]


def private_roots(root, component):
    """Where a component's own files are found by other names: itself, its folders, and src/'s
    folders (a layer's headers by bare name)."""
    base = os.path.join(root, component)
    return [base] + subfolders(base) + subfolders(os.path.join(base, "src"))


def owners(root, components, included):
    """[(component, "public"|"private")] of every folder where `included` is found."""
    found = []
    for component in components:
        for folder in public_roots(root, component):
            if os.path.isfile(os.path.join(folder, included)):
                found.append((component, "public"))
        for folder in private_roots(root, component):
            if os.path.isfile(os.path.join(folder, included)):
                found.append((component, "private"))
        tests = os.path.join(root, "tests", component)
        if os.path.isfile(os.path.join(tests, included)):
            found.append(("tests/" + component, "private"))
    support = os.path.join(root, "tests", "support")
    if os.path.isfile(os.path.join(support, included)):
        found.append(("tests/support", "private"))
    return found


def files_of(folder):
    for top, dirs, names in os.walk(folder):
        dirs[:] = sorted(d for d in dirs if d not in SKIPPED and not d.startswith("."))
        for name in sorted(names):
            if name.endswith(SOURCE_SUFFIXES):
                yield os.path.join(top, name)


def check(rules_path, root):
    rules, lines = read_block(rules_path, "components")
    components = sorted(name for name in rules if "/" not in name)
    problems = []
    for name in sorted(rules):
        for used in sorted(rules[name] - set(components)):
            problems.append(f"{rules_path}: rule \"{lines[name]}\" names {used}, which is no "
                            f"component")
    for component in components:
        if not os.path.isdir(os.path.join(root, component)):
            problems.append(f"{rules_path}: component {component} has no folder")
    # Each folder checked, as which component, with what it may use.
    checked = []
    for component in components:
        checked.append((os.path.join(root, component), component, component, False))
        tests = os.path.join(root, "tests", component)
        if os.path.isdir(tests):
            checked.append((tests, "tests/" + component, component, True))
    for folder, who, component, is_test in checked:
        if not os.path.isdir(folder):
            continue
        allowed = rules.get(component, set()) | {component}
        if is_test:
            allowed |= rules.get(who, set())
        for path in files_of(folder):
            for number, included in includes(path):
                if os.path.isfile(os.path.join(os.path.dirname(path), included)):
                    continue  # beside the including file
                found = owners(root, components, included)
                if not found:
                    continue  # not ours: a system or generated header
                own = {component, "tests/" + component} if is_test else {component}
                if is_test:
                    own.add("tests/support")
                if any(owner in own for owner, _ in found):
                    continue
                where = os.path.relpath(path, root)
                public = [owner for owner, kind in found if kind == "public"]
                if is_test and any(owner in rules.get(who, set()) for owner, _ in found):
                    continue  # a peer this component's tests run (their rule names it)
                if not public:
                    owner = found[0][0]
                    problems.append(
                        f"{where}:{number}: #include \"{included}\": {who} includes a private "
                        f"header of {owner} (its src/); move what both use to a library of "
                        f"common/, or include {owner}'s public headers")
                    continue
                if not any(owner in allowed for owner in public):
                    rule = lines.get(who if is_test and who in lines else component,
                                     f"{component}: (no rule)")
                    problems.append(
                        f"{where}:{number}: #include \"{included}\": {who} may not include "
                        f"{public[0]} (rule \"{rule}\" in {rules_path})")
    return problems


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rules", required=True)
    parser.add_argument("--root", required=True)
    args = parser.parse_args()
    return verdict(check(args.rules, args.root),
                   f"component includes kept: {args.root} against {args.rules}")


if __name__ == "__main__":
    sys.exit(main())
