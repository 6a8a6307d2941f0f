"""What the include checks share: a rules block read from a Markdown file, the quoted includes
of a source file, the verdict, and the self-test of a check on a fixture tree.

agent_layers.py checks the node agent's layers (node-agent/README.md's ```layers block);
component_includes.py checks the components of the whole tree (docs/README.md's ```components
block); include_style.py the one include spelling and the namespaces (its ```namespaces block)."""
import os
import re
import shutil
import subprocess
import sys
import tempfile

INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"')


def read_block(path, fence):
    """{name: set of names it may use}, and {name: its rule's line}, from the ```<fence> block.
    A `#` starts a comment."""
    rules, lines = {}, {}
    inside = found = False
    with open(path, encoding="utf-8") as text:
        for line in text:
            if not inside and line.strip() == "```" + fence:
                inside = found = True
                continue
            if inside and line.strip().startswith("```"):
                break
            stripped = line.split("#", 1)[0].strip()
            if inside and stripped:
                name, _, used = stripped.partition(":")
                rules[name.strip()] = set(used.split())
                lines[name.strip()] = line.strip()
    if not found:
        sys.exit(f"{path}: no ```{fence} block")
    return rules, lines


def includes(path):
    """(line number, included name) of every `#include "..."` of a source file."""
    with open(path, encoding="utf-8", errors="replace") as text:
        for number, line in enumerate(text, 1):
            match = INCLUDE.match(line)
            if match:
                yield number, match.group(1)


def verdict(problems, kept):
    """Prints the problems (or `kept`) and returns the exit status: 1 when there are any."""
    for problem in problems:
        print(problem)
    if problems:
        print(f"{len(problems)} include rule violation(s)")
        return 1
    print(kept)
    return 0


def selftest(command, fixture, expected, violations):
    """Runs `command(fixture)` on the fixture tree: it must exit 1 printing every `expected` text.
    Then on a copy without the `violations` (paths relative to the fixture): it must exit 0. The
    exit status of the self-test."""
    failures = []
    broken = subprocess.run(command(fixture), capture_output=True, text=True)
    print(broken.stdout, end="")
    if broken.returncode != 1:
        failures.append(f"the fixture with violations exited {broken.returncode}, not 1")
    for text in expected:
        if text not in broken.stdout:
            failures.append(f"missing from the output: {text}")
    with tempfile.TemporaryDirectory() as scratch:
        clean = os.path.join(scratch, "fixture")
        shutil.copytree(fixture, clean)
        for violation in violations:
            target = os.path.join(clean, violation)
            if os.path.isdir(target):
                shutil.rmtree(target)
            else:
                os.remove(target)
        kept = subprocess.run(command(clean), capture_output=True, text=True)
        print(kept.stdout, end="")
        if kept.returncode != 0:
            failures.append("the fixture without violations failed")
    for failure in failures:
        print("FAIL: " + failure)
    return 1 if failures else 0
