#!/usr/bin/env python3
"""Clang's thread-safety analysis over the node agent's sources that use the lock annotations
(common/include/tessera/thread_annotations.h): each such .cc of the build's compile_commands.json
is parsed (clang++ -fsyntax-only, so nothing is built) with its include paths, defines and
standard, and -Wthread-safety -Wthread-safety-beta -Werror. The release build compiles with GCC,
where the annotations expand to nothing, so this is where they are checked.

Usage: thread_safety_check.py --compile-commands build/compile_commands.json --under node-agent/src
       [--clang clang++] [--jobs N]
       thread_safety_check.py ... --file fixture.cc   (checks that one file, with the flags of the
                                                        first selected source)
Exits 1 naming each warning when the analysis finds one, or when no source uses the annotations."""
import argparse
import concurrent.futures
import json
import os
import re
import shlex
import shutil
import subprocess
import sys

ANNOTATIONS = "tessera/thread_annotations.h"
CHECK_FLAGS = ["-fsyntax-only", "-Wthread-safety", "-Wthread-safety-beta", "-Werror"]
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)


def arguments_of(entry):
    if "arguments" in entry:
        return list(entry["arguments"])
    return shlex.split(entry["command"])


def clang_flags(entry):
    """The flags that decide what the source means (include paths, defines, the standard); GCC's
    warning and code generation flags are left out: the analysis' warnings are the point here."""
    args = arguments_of(entry)[1:]
    flags = []
    i = 0
    while i < len(args):
        arg = args[i]
        if arg in ("-I", "-isystem", "-D", "-include", "-iquote"):
            flags += [arg, args[i + 1]]
            i += 2
            continue
        if arg.startswith(("-I", "-isystem", "-D", "-std=", "-iquote")):
            flags.append(arg)
        i += 1
    return flags


def include_dirs(entry):
    dirs = [os.path.dirname(entry["file"])]
    args = arguments_of(entry)
    for i, arg in enumerate(args):
        if arg in ("-I", "-isystem", "-iquote") and i + 1 < len(args):
            dirs.append(args[i + 1])
        elif arg.startswith("-I"):
            dirs.append(arg[2:])
        elif arg.startswith("-isystem"):
            dirs.append(arg[len("-isystem"):])
    return [os.path.join(entry.get("directory", ""), d) for d in dirs]


def uses_annotations(path, dirs, seen):
    """True when `path` includes thread_annotations.h, directly or through the repo's headers."""
    if path in seen:
        return False
    seen.add(path)
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            text = f.read()
    except OSError:
        return False
    for name in INCLUDE.findall(text):
        if name == ANNOTATIONS:
            return True
        for d in [os.path.dirname(path)] + dirs:
            candidate = os.path.normpath(os.path.join(d, name))
            if os.path.isfile(candidate):
                if uses_annotations(candidate, dirs, seen):
                    return True
                break
    return False


def check(clang, entry, source):
    command = [clang] + clang_flags(entry) + CHECK_FLAGS + [source]
    done = subprocess.run(command, cwd=entry.get("directory") or None, capture_output=True,
                          text=True)
    return source, done.returncode, done.stdout + done.stderr


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--compile-commands", required=True)
    parser.add_argument("--under", required=True, help="the sources to check: those under here")
    parser.add_argument("--clang", default="clang++")
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--file", help="check this file instead, with a selected source's flags")
    options = parser.parse_args()

    clang = shutil.which(options.clang)
    if clang is None:
        print(f"thread-safety check: {options.clang} not found (scripts/install-deps.sh installs "
              "clang)")
        return 1
    with open(options.compile_commands, encoding="utf-8") as f:
        entries = json.load(f)
    under = os.path.realpath(options.under) + os.sep
    selected = []
    for entry in entries:
        source = os.path.realpath(os.path.join(entry.get("directory", ""), entry["file"]))
        if not source.startswith(under) or not source.endswith(".cc"):
            continue
        if uses_annotations(source, include_dirs(entry), set()):
            selected.append((entry, source))
    if not selected:
        print(f"thread-safety check: no source under {options.under} in "
              f"{options.compile_commands} includes {ANNOTATIONS}")
        return 1
    if options.file:
        selected = [(selected[0][0], os.path.realpath(options.file))]

    failed = 0
    with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, options.jobs)) as pool:
        for source, code, output in pool.map(lambda item: check(clang, *item), selected):
            if code != 0:
                failed += 1
                print(f"FAIL {source}\n{output}", end="" if output.endswith("\n") else "\n")
    print(f"thread-safety check: {len(selected)} source(s), {failed} failed "
          f"({' '.join(CHECK_FLAGS[1:])})")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
