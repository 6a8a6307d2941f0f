#!/usr/bin/env python3
"""The include graph check must fail on a doc whose picture lacks an arrow the code has (naming the
command that regenerates it) and pass once --write has redrawn it; and it must refuse a tree whose
layers include each other (the agent_layers fixture, where low/ reaches up into high/).

Usage: agent_include_graph_selftest.py agent_include_graph.py docs/node-agent.md node-agent/src
                                       fixtures/agent_layers"""
import os
import shutil
import subprocess
import sys
import tempfile


def run(script, *args):
    done = subprocess.run([sys.executable, script, *args], capture_output=True, text=True)
    print(done.stdout, end="")
    return done


def main():
    script, doc, src, cyclic = sys.argv[1:5]
    failures = []
    with tempfile.TemporaryDirectory() as scratch:
        stale = os.path.join(scratch, "node-agent.md")
        shutil.copy(doc, stale)
        with open(stale, encoding="utf-8") as f:
            text = f.read()
        arrow = "  agent --> api\n"
        if arrow not in text:
            failures.append(f"{doc} has no arrow {arrow.strip()!r} to take out")
        with open(stale, "w", encoding="utf-8") as f:
            f.write(text.replace(arrow, "", 1))
        checked = run(script, "--src", src, "--doc", stale, "--check")
        if checked.returncode != 1 or "agent_include_graph.py --write" not in checked.stdout:
            failures.append("a picture without one of the code's arrows was not called stale")
        if run(script, "--src", src, "--doc", stale, "--write").returncode != 0:
            failures.append("--write failed")
        if run(script, "--src", src, "--doc", stale, "--check").returncode != 0:
            failures.append("the picture --write drew is not current")
        cycle = run(script, "--src", os.path.join(cyclic, "src"), "--doc", stale, "--check")
        if cycle.returncode != 1 or "runs back up" not in cycle.stdout:
            failures.append("layers that include each other were not refused")
    for failure in failures:
        print("FAIL: " + failure)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
