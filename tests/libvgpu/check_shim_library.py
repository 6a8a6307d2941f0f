#!/usr/bin/env python3
"""Checks the built libvgpu.so the way a container will load it.

Fails on: any glibc symbol version newer than GLIBC_2.17 (objdump -T and the version needs of
readelf -V), a DT_NEEDED on libstdc++ or libgcc_s (readelf -d), or a defined dynamic symbol that is
neither dlsym nor a hooked entry point of libvgpu/hooks.def.

Usage: check_shim_library.py --library libvgpu.so --hooks hooks.def [--objdump objdump]
                             [--readelf readelf]
"""

import argparse
import re
import subprocess
import sys

MAX_GLIBC = (2, 17)
HOOK = re.compile(r"^TESSERA_HOOK\(\s*\w+\s*,\s*\w+\s*,\s*(\w+)\s*,", re.M)
GLIBC = re.compile(r"GLIBC_(\d+)\.(\d+)(?:\.(\d+))?")
FORBIDDEN_NEEDED = re.compile(r"\[(libstdc\+\+|libgcc_s)[^\]]*\]")


def run(*command) -> str:
    return subprocess.run(command, check=True, capture_output=True, text=True).stdout


def main(argv) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--library", required=True)
    parser.add_argument("--hooks", required=True)
    parser.add_argument("--objdump", default="objdump")
    parser.add_argument("--readelf", default="readelf")
    args = parser.parse_args(argv)

    with open(args.hooks, encoding="utf-8") as hooks:
        allowed = set(HOOK.findall(hooks.read())) | {"dlsym"}
    if len(allowed) < 10:
        print(f"FAIL: only {len(allowed)} names parsed from {args.hooks}")
        return 1

    problems = []
    dynamic = run(args.objdump, "-T", args.library)
    exported = set()
    for line in dynamic.splitlines():
        for match in GLIBC.finditer(line):
            version = tuple(int(part) for part in match.groups() if part is not None)
            if version[:2] > MAX_GLIBC:
                problems.append(f"needs {match.group(0)}: {line.strip()}")
        fields = line.split()
        # Defined symbols: "<addr> <flags> <section> <size> <version> <name>", section not *UND*.
        if len(fields) >= 4 and re.fullmatch(r"[0-9a-f]{16}", fields[0]) and "*UND*" not in line:
            name = fields[-1]
            if name not in allowed:
                problems.append(f"exports {name} (not dlsym nor a hook in hooks.def)")
            exported.add(name)
    missing = allowed - exported
    if missing:
        problems.append(f"does not export {sorted(missing)}")

    for match in GLIBC.finditer(run(args.readelf, "-V", args.library)):
        version = tuple(int(part) for part in match.groups() if part is not None)
        if version[:2] > MAX_GLIBC:
            problems.append(f"version need {match.group(0)} (readelf -V)")

    for line in run(args.readelf, "-d", args.library).splitlines():
        if "(NEEDED)" in line and FORBIDDEN_NEEDED.search(line):
            problems.append(f"depends on {line.split()[-1]}")

    for problem in sorted(set(problems)):
        print(f"FAIL: {problem}")
    if problems:
        return 1
    print(f"OK: {len(exported)} exported symbols, all allowed; glibc <= 2.17; no C++ runtime "
          "dependency")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
