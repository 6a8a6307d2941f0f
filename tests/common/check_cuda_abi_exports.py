#!/usr/bin/env python3
"""Checks that every symbol in the generated cuGetProcAddress table is exported by libcuda.

The stub libcuda.so shipped with the toolkit exports the same driver API as the real library, so
a generated row naming a symbol it lacks is a wrong row. Exits 77 (CTest's skip code here) when
the library is absent.

Usage: check_cuda_abi_exports.py --table cuda_proc_table.inc --library libcuda.so [--nm nm]
"""

import argparse
import os
import re
import subprocess
import sys

SKIP = 77
ROW = re.compile(r'^TESSERA_PROC_ENTRY\("(\w+)", (\d+), ([01]), "(\w+)"\)$', re.M)


def main(argv) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--table", required=True)
    parser.add_argument("--library", required=True)
    parser.add_argument("--nm", default="nm")
    args = parser.parse_args(argv)

    if not os.path.exists(args.library):
        print(f"SKIPPED: {args.library} is absent, nothing to check the table against")
        return SKIP

    with open(args.table, encoding="utf-8") as table:
        rows = ROW.findall(table.read())
    if not rows:
        print(f"FAILED: no TESSERA_PROC_ENTRY rows in {args.table}")
        return 1

    nm = subprocess.run([args.nm or "nm", "-D", "--defined-only", args.library],
                        capture_output=True, text=True, check=False)
    if nm.returncode != 0:
        print(f"FAILED: {args.nm} -D {args.library}: {nm.stderr.strip()}")
        return 1
    exported = {line.split()[-1] for line in nm.stdout.splitlines() if line.strip()}

    missing = [(name, version, symbol) for name, version, _, symbol in rows
               if symbol not in exported]
    for name, version, symbol in missing:
        print(f"not exported: {symbol} (row {name} v{version})")
    print(f"{len(rows) - len(missing)} of {len(rows)} table symbols are exported by "
          f"{args.library} ({len(exported)} exports)")
    return 1 if missing else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
