#!/usr/bin/env python3
"""Runs clang's thread-safety analysis over the shim's sources (libvgpu/src/spin_lock.h: the
locks and their order). Each libvgpu translation unit of compile_commands.json is compiled again
by clang++ with -fsyntax-only -Wthread-safety -Werror, with the include paths and definitions of
its own compile command. Exits 77 (skipped) when clang++ or compile_commands.json is missing."""
import argparse
import json
import os
import shlex
import shutil
import subprocess
import sys


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--compile-commands", required=True)
    parser.add_argument("--source-dir", required=True, help="libvgpu/src")
    parser.add_argument("--clang", default="clang++")
    args = parser.parse_args()
    clang = shutil.which(args.clang)
    if not clang:
        print(f"{args.clang} not found: skipped")
        return 77
    if not os.path.exists(args.compile_commands):
        print(f"{args.compile_commands} not found (CMAKE_EXPORT_COMPILE_COMMANDS off): skipped")
        return 77
    with open(args.compile_commands, encoding="utf-8") as stream:
        entries = json.load(stream)
    prefix = args.source_dir.rstrip("/") + "/"
    seen = set()
    failures = 0
    for entry in entries:
        source = entry["file"]
        if not source.startswith(prefix) or source in seen:
            continue
        seen.add(source)
        words = shlex.split(entry["command"]) if "command" in entry else entry["arguments"]
        flags = [w for w in words if w.startswith(("-I", "-D", "-std="))]
        isystem = [words[i + 1] for i, w in enumerate(words[:-1]) if w == "-isystem"]
        command = [clang, "-fsyntax-only", "-Wthread-safety", "-Wthread-safety-beta", "-Werror",
                   *flags, *[f"-isystem{d}" for d in isystem], source]
        result = subprocess.run(command, cwd=entry["directory"], capture_output=True, text=True)
        if result.returncode != 0:
            failures += 1
            print(f"FAILED {source}\n{result.stdout}{result.stderr}")
    if not seen:
        print(f"no source under {prefix} in {args.compile_commands}")
        return 1
    print(f"{len(seen)} sources checked, {failures} with thread-safety errors")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
