#!/usr/bin/env python3
"""libvgpu's OS seam: every libc function and system call the shim makes directly is in
libvgpu/src/os/ (docs/libvgpu.md, "The OS seam"). Fails naming the file, line and call of each
source outside the seam that makes one of those calls itself (unqualified, `::name` or
`std::name`); a call through another namespace (`os::open`), a member call (`.close()`) and a
declaration (`bool open();`) are not OS calls.

Usage: os_seam.py --src libvgpu/src [--seam os]"""
import argparse
import os
import re
import sys

# What the seam wraps. dl* and pthread_* are not here: glibc_compat.h pins their versions.
CALLS = (
    "clock_gettime clock_nanosleep nanosleep usleep sleep sched_yield "
    "mmap munmap mprotect mremap "
    "syscall fstat fstatat stat lstat newfstatat statx fstatvfs statvfs getdents64 opendir readdir "
    "open openat creat close read write pread pwrite readv writev lseek ftruncate fsync "
    "flock fcntl ioctl rename renameat unlink unlinkat link linkat mkdir mkdirat fchmod chmod "
    "getenv secure_getenv setenv getpid gettid getuid geteuid getppid "
    "__register_atfork pthread_atfork fork"
).split()
GLOBALS = ("environ",)  # variables, not calls
# A word before `name(` that makes it a call, not a declaration of a function named `name`.
CALL_KEYWORDS = {"return", "else", "do", "case", "co_return", "throw", "not", "and", "or"}

CALL = re.compile(r"(?P<qualifier>(?:\b\w+)?::)?\b(?P<name>" + "|".join(CALLS) + r")\s*\(")
GLOBAL = re.compile(r"(?<![\w.>:])\b(?P<name>" + "|".join(GLOBALS) + r")\b")
# Comments, string and character literals: blanked (newlines kept, so line numbers hold).
NOISE = re.compile(r'//[^\n]*|/\*.*?\*/|"(?:\\.|[^"\\\n])*"|\'(?:\\.|[^\'\\\n])*\'', re.S)


def blank(match):
    return re.sub(r"[^\n]", " ", match.group(0))


def direct_calls(text):
    """(line, name) of every direct OS call in a C++ source."""
    code = NOISE.sub(blank, text)
    code = re.sub(r"^\s*#[^\n]*", blank, code, flags=re.M)  # preprocessor lines
    found = []
    for match in CALL.finditer(code):
        qualifier = match.group("qualifier")
        if qualifier and qualifier not in ("::", "std::"):
            continue  # os::open, NvmlSource::open
        before = code[:match.start()].rstrip()
        if not qualifier:
            if before.endswith(".") or before.endswith("->"):
                continue  # a member call
            previous = re.search(r"(\w+)$", before)
            if previous and previous.group(1) not in CALL_KEYWORDS:
                continue  # `bool open()`: a declaration
        found.append((code.count("\n", 0, match.start()) + 1, match.group("name") + "()"))
    for match in GLOBAL.finditer(code):
        found.append((code.count("\n", 0, match.start()) + 1, match.group("name")))
    return sorted(found)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--src", required=True, help="the shim's source folder")
    parser.add_argument("--seam", default="os", help="the seam's folder, relative to --src")
    args = parser.parse_args()
    seam = os.path.normpath(os.path.join(args.src, args.seam))
    problems = []
    for folder, folders, files in os.walk(args.src):
        folders.sort()
        if os.path.normpath(folder) == seam:
            folders.clear()
            continue
        for name in sorted(files):
            if not name.endswith((".cc", ".h")):
                continue
            path = os.path.join(folder, name)
            with open(path, encoding="utf-8") as source:
                text = source.read()
            for line, call in direct_calls(text):
                problems.append(f"{os.path.relpath(path, args.src)}:{line}: {call}: a direct OS "
                                f"call; go through the OS seam ({args.seam}/)")
    for problem in problems:
        print(problem)
    if problems:
        print(f"{len(problems)} direct OS call(s) outside the seam")
        return 1
    print(f"every OS call under {args.src} goes through {args.seam}/")
    return 0


if __name__ == "__main__":
    sys.exit(main())
