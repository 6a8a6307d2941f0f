#!/usr/bin/env python3
"""`tessera top` on a real terminal: tmux at 80x24 runs `tessera top --local` while two
`tessera run` shares work on the simulated GPU (memory-fill holding memory, compute-burn
launching). The captured screen must show both shares, their limits and their memory bars, fit
80x24, and 'q' must end it; ^Z in an interactive shell must give the terminal back (the normal
screen, the cursor shown) and `fg` must take it again. `tessera top --once` and `tessera shares -o table|json|yaml` are
checked against the same shares. The capture is saved (--capture) for docs/cli.md.

  check_top_tmux.py --tessera T --burn B --memory-fill M --lib-dir D [--capture FILE]

Exits 77 (skipped) when tmux is not installed.
"""

import argparse
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time

SKIP = 77
GIB = 1 << 30


def fail(message, screen=None):
    print(f"FAIL: {message}")
    if screen is not None:
        print("---- screen ----\n" + screen + "\n----------------")
    sys.exit(1)


class Tmux:
    """A private tmux server (its own socket in the test's folder, no user configuration)."""

    def __init__(self, work, env):
        self.env = dict(env)
        self.env["TMUX_TMPDIR"] = work
        self.env.pop("TMUX", None)

    def run(self, *args, check=True):
        done = subprocess.run(["tmux", "-L", "tessera-top-test", "-f", "/dev/null", *args],
                              env=self.env, capture_output=True, text=True, timeout=20)
        if check and done.returncode != 0:
            fail(f"tmux {' '.join(args)}: {done.stderr.strip()}")
        return done

    def capture(self):
        return self.run("capture-pane", "-p", "-t", "top").stdout

    def alive(self):
        return self.run("has-session", "-t", "top", check=False).returncode == 0

    def kill(self):
        self.run("kill-server", check=False)


# "used/limit" on a share line: "3.5Gi/4Gi".
MEMORY = re.compile(r" ([0-9.]+(?:[KMGT]i)?)/([0-9.]+(?:[KMGT]i)?) ")
UNITS = {"": 1, "Ki": 1 << 10, "Mi": 1 << 20, "Gi": 1 << 30, "Ti": 1 << 40}


def quantity(text):
    number = re.match(r"[0-9.]+", text).group(0)
    return float(number) * UNITS[text[len(number):]]


def share_lines(screen):
    lines = screen.splitlines()
    for i, line in enumerate(lines):
        if line.startswith("SHARE "):
            return lines[i + 1:]
    return []


def wait_for(check, timeout=10):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if check():
            return True
        time.sleep(0.2)
    return check()


def check_suspend(tmux, top):
    """^Z in an interactive shell: top gives the terminal back before it stops (the shell's prompt
    on the normal screen, the cursor shown), `fg` takes it again and top draws, 'q' ends it."""
    prompt = "shell$"
    tmux.run("new-session", "-d", "-x", "80", "-y", "24", "-s", "top",
             f"env PS1='{prompt} ' bash --norc --noprofile -i")

    def state():
        return tmux.run("display-message", "-p", "-t", "top",
                        "#{alternate_on} #{cursor_flag}").stdout.split()

    def at_prompt():
        lines = [line for line in tmux.capture().splitlines() if line.strip()]
        return bool(lines) and lines[-1].rstrip() == prompt

    def drawing():
        return tmux.capture().startswith("tessera top - ") and state()[0] == "1"

    if not wait_for(at_prompt):
        fail("no shell prompt", tmux.capture())
    tmux.run("send-keys", "-t", "top", "-l", top)
    tmux.run("send-keys", "-t", "top", "Enter")
    if not wait_for(drawing):
        fail("tessera top did not start in the shell", tmux.capture())
    tmux.run("send-keys", "-t", "top", "C-z")
    if not wait_for(lambda: at_prompt() and "Stopped" in tmux.capture()):
        fail(f"^Z did not give the shell its prompt back (terminal state {state()})",
             tmux.capture())
    if state() != ["0", "1"]:
        fail(f"after ^Z: terminal state {state()} (alternate screen, cursor shown); expected "
             "the normal screen and the cursor", tmux.capture())
    tmux.run("send-keys", "-t", "top", "-l", "fg")
    tmux.run("send-keys", "-t", "top", "Enter")
    if not wait_for(drawing):
        fail(f"after fg: tessera top did not draw again (terminal state {state()})",
             tmux.capture())
    if state() != ["1", "0"]:
        fail(f"after fg: terminal state {state()}; expected top's alternate screen, no cursor",
             tmux.capture())
    tmux.run("send-keys", "-t", "top", "q")
    if not wait_for(at_prompt) or state() != ["0", "1"]:
        fail(f"after fg and q: terminal state {state()}", tmux.capture())
    tmux.run("kill-session", "-t", "top")
    print("^Z, fg and q in bash: the terminal given back and taken again")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--tessera", required=True)
    parser.add_argument("--burn", required=True)
    parser.add_argument("--memory-fill", required=True)
    parser.add_argument("--lib-dir", required=True)
    parser.add_argument("--capture", help="save the captured screen here")
    args = parser.parse_args()
    if shutil.which("tmux") is None:
        print("SKIP: tmux is not installed (scripts/install-deps.sh installs it)")
        sys.exit(SKIP)

    with tempfile.TemporaryDirectory(prefix="tessera-top-test-") as work:
        runtime = os.path.join(work, "xdg")
        os.mkdir(runtime, 0o700)
        shares = os.path.join(runtime, "tessera", "shares")
        os.makedirs(shares, 0o700)
        env = dict(os.environ)
        for name in list(env):
            if name.startswith("TESSERA_") or name.startswith("CUDA_"):
                del env[name]
        env.update({
            "LD_LIBRARY_PATH": args.lib_dir,
            "SIMGPU_STATE": os.path.join(work, "simgpu.state"),
            "SIMGPU_DEVICES": "name=NVIDIA H200,memory=143771Mi,sms=132,cc=9.0",
            "SIMGPU_KERNEL_US": "burn_fma=50",
            "XDG_RUNTIME_DIR": runtime,
            "ASAN_OPTIONS": "verify_asan_link_order=0",
        })

        # Two shares under load: each holds memory (a fill) and launches kernels (a burn).
        loads = []

        # The loads outlive the test (killed at its end): they must run through every check, however
        # long the machine takes for them.
        def start_share(name, memory, cores, hold):
            burn = f"{args.burn} --seconds 600 --blocks-per-sm 8 --sync-every 64 --launch kernel"
            fill = f"{args.memory_fill} --chunk 512Mi --max {hold} --no-fine --hold-seconds 600"
            command = [args.tessera, "run", "--memory", memory, "--cores", cores, "--share-dir",
                       os.path.join(shares, name), "--", "sh", "-c", f"{fill} & {burn} & wait"]
            loads.append(subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL,
                                          stderr=subprocess.PIPE, text=True,
                                          start_new_session=True))

        tmux = Tmux(work, env)
        try:
            start_share("train", "4Gi", "30", "2560Mi")
            start_share("infer", "8Gi", "60", "2Gi")

            # `tessera top` itself, full screen in an 80x24 terminal.
            top = (f"exec env XDG_RUNTIME_DIR={runtime} LD_LIBRARY_PATH={args.lib_dir} "
                   f"SIMGPU_STATE={env['SIMGPU_STATE']} SIMGPU_DEVICES='{env['SIMGPU_DEVICES']}' "
                   f"{args.tessera} top --local")
            tmux.run("new-session", "-d", "-x", "80", "-y", "24", "-s", "top", top)

            # Wait for a screen with both shares holding their memory (the same two refreshes in a
            # row: the fills are done) and a cores rate (a rate needs two snapshots).
            deadline = time.time() + 40
            screen = ""
            previous = None
            ready = False
            while time.time() < deadline and not ready:
                time.sleep(0.7)
                for load in loads:
                    if load.poll() is not None:
                        fail(f"a share's command ended early: {load.stderr.read()}")
                if not tmux.alive():
                    fail("tessera top ended by itself", screen)
                screen = tmux.capture()
                rows = {line.split()[0]: line for line in share_lines(screen) if line.strip()}
                memory = {name: MEMORY.search(rows.get(name, "")) for name in ("train", "infer")}
                held = tuple(m.group(0) if m and m.group(1) != "0" else None
                             for m in memory.values())
                ready = (None not in held and held == previous and
                         re.search(r" [0-9]+/30% ", rows["train"]) and
                         re.search(r" [0-9]+/60% ", rows["infer"]))
                previous = held
            if not ready:
                fail("the screen never showed both shares with their memory and cores", screen)

            lines = screen.rstrip("\n").split("\n")
            if len(lines) > 24 or any(len(line) > 80 for line in lines):
                fail("the screen does not fit 80x24", screen)
            if not lines[0].startswith("tessera top - ") or "source: local" not in lines[0]:
                fail("no header line", screen)
            if not any(line.startswith("0   NVIDIA H200") for line in lines):
                fail("no GPU line from NVML", screen)
            rows = {line.split()[0]: line for line in share_lines(screen) if line.strip()}
            # Each share's limit, and a memory bar proportional to its used/limit.
            for name, limit in [("train", "4Gi"), ("infer", "8Gi")]:
                memory = MEMORY.search(rows[name])
                if memory.group(2) != limit:
                    fail(f"{name}'s limit is {memory.group(2)}, expected {limit}", screen)
                bar = re.search(r"\[(#*)(\.*)\]", rows[name])
                if not bar:
                    fail(f"no memory bar on the {name} line", screen)
                inside = len(bar.group(1)) + len(bar.group(2))
                expected = round(quantity(memory.group(1)) / quantity(limit) * inside)
                # The figure on screen is rounded to one decimal: a character either way.
                if abs(len(bar.group(1)) - expected) > 1 or len(bar.group(1)) == 0:
                    fail(f"{name}'s bar is {len(bar.group(1))} of {inside}, expected about "
                         f"{expected}", screen)
            if "compute-burn" not in rows["train"] and "memory-fill" not in rows["train"]:
                fail("no processes on the train line", screen)
            print(screen)
            if args.capture:
                with open(args.capture, "w") as out:
                    out.write(screen)

            # 'q' quits, and the terminal gets its screen back.
            tmux.run("send-keys", "-t", "top", "q")
            deadline = time.time() + 5
            while tmux.alive() and time.time() < deadline:
                time.sleep(0.1)
            if tmux.alive():
                fail("'q' did not end tessera top", tmux.capture())

            # ^C ends it too, as asked (exit 0, docs/cli.md#exit-status), with the terminal as it
            # was: no alternate screen, the cursor shown, line editing and echo back on (the shell
            # after it ignores SIGINT, so it reports).
            after = (f"trap '' INT; {top[len('exec '):]}; echo exit=$?; "
                     "stty -a | tr ' ' '\\n' | grep -x -e '-*icanon' -e '-*echo'; echo checked; sleep 30")
            tmux.run("new-session", "-d", "-x", "80", "-y", "24", "-s", "top", after)
            deadline = time.time() + 10
            while "tessera top - " not in tmux.capture() and time.time() < deadline:
                time.sleep(0.2)
            tmux.run("send-keys", "-t", "top", "C-c")
            deadline = time.time() + 5
            while "checked" not in tmux.capture().split() and time.time() < deadline:
                time.sleep(0.2)
            restored = tmux.capture()
            state = tmux.run("display-message", "-p", "-t", "top",
                             "#{alternate_on} #{cursor_flag}").stdout.split()
            if "exit=0" not in restored or "icanon" not in restored.split() or \
                    "echo" not in restored.split() or state != ["0", "1"]:
                fail(f"after ^C: terminal state {state} (alternate screen, cursor shown)",
                     restored)
            tmux.run("kill-session", "-t", "top")

            check_suspend(tmux, top[len("exec "):])

            # Without a terminal: plain lines, once.
            once = subprocess.run([args.tessera, "top", "--local", "--once"], env=env,
                                  capture_output=True, text=True, timeout=20)
            if once.returncode != 0 or "\x1b" in once.stdout:
                fail(f"top --once: exit {once.returncode}, {once.stderr!r}")
            for expected in ["train", "infer", "/4Gi", "/8Gi"]:
                if expected not in once.stdout:
                    fail(f"top --once lacks {expected!r}", once.stdout)

            # `tessera shares`, the same shares in each format.
            table = subprocess.run([args.tessera, "shares", "--local"], env=env,
                                   capture_output=True, text=True, timeout=20)
            header = table.stdout.splitlines()[0].split() if table.stdout else []
            if header != ["NAMESPACE", "CLAIM", "SHARE", "GPU", "MEMORY", "CORES", "CLASS",
                          "PROCESSES", "AGE"]:
                fail(f"shares table header {header}", table.stdout + table.stderr)
            print(table.stdout)
            listed = subprocess.run([args.tessera, "shares", "--local", "-o", "json"], env=env,
                                    capture_output=True, text=True, timeout=20)
            node = json.loads(listed.stdout)
            by_name = {share["name"]: share for share in node["shares"]}
            if sorted(by_name) != ["infer", "train"]:
                fail(f"shares -o json lists {sorted(by_name)}")
            if by_name["train"]["devices"][0]["memory_limit_bytes"] != 4 * GIB:
                fail(f"train's limit: {by_name['train']['devices'][0]}")
            if by_name["infer"]["devices"][0]["cores_request_percent"] != 60:
                fail(f"infer's cores: {by_name['infer']['devices'][0]}")
            # --cores 60 alone: its limit is its request, and memory likewise: guaranteed.
            if by_name["infer"]["qos_class"] != "guaranteed":
                fail(f"infer's class: {by_name['infer']}")
            yaml = subprocess.run([args.tessera, "shares", "--local", "-o", "yaml"], env=env,
                                  capture_output=True, text=True, timeout=20)
            if yaml.returncode != 0 or "name: train" not in yaml.stdout:
                fail(f"shares -o yaml: {yaml.stdout!r} {yaml.stderr!r}")
        finally:
            tmux.kill()
            for load in loads:
                if load.poll() is None:
                    os.killpg(load.pid, signal.SIGTERM)
            for load in loads:
                try:
                    load.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    os.killpg(load.pid, signal.SIGKILL)
                    load.wait()
    print("PASS")


if __name__ == "__main__":
    main()
