#!/usr/bin/env python3
"""`tessera run` fails closed and cleans up after itself, on the simulated GPU:

- every exit status `tessera run --help` documents is produced by its situation;
- a --libvgpu that is not a loadable shared library, an empty --memory/--memory-limit/--cores/
  --cores-limit (or its old name --cores-burst) and
  malformed values are errors (125) naming the flag or path, and nothing runs or is created;
- temporary shares live in this user's private local share root (0700, symlinks refused), each
  with its owner file;
- SIGKILL of tessera kills its command within a short bound, and the next run removes the share
  folder the killed one left, saying so in one line.

  check_run_safety.py --tessera T --lib-dir D
"""

import argparse
import os
import re
import signal
import stat
import struct
import subprocess
import sys
import tempfile
import time


def fail(message):
    print(f"FAIL: {message}")
    sys.exit(1)


def gone(pid):
    """True when `pid` no longer runs (a zombie nobody reaped counts as gone)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            state = f.read().rsplit(")", 1)[1].split()[0]
        return state in ("Z", "X")
    except (FileNotFoundError, ProcessLookupError):
        return True


def elf_header(elf_class=2, elf_type=3, machine=62):
    """An ELF header (64 bytes): class 2 = 64-bit, type 3 = ET_DYN, machine 62 = x86-64."""
    ident = b"\x7fELF" + bytes([elf_class, 1, 1]) + bytes(9)
    return ident + struct.pack("<HHI", elf_type, machine, 1) + bytes(64 - 24)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--tessera", required=True)
    parser.add_argument("--lib-dir", required=True)
    args = parser.parse_args()

    with tempfile.TemporaryDirectory(prefix="tessera-run-safety-") as work:
        xdg = os.path.join(work, "xdg")
        os.mkdir(xdg, 0o700)
        root = os.path.join(xdg, "tessera", "shares")
        env = dict(os.environ)
        env.update({
            "LD_LIBRARY_PATH": args.lib_dir,
            "SIMGPU_STATE": os.path.join(work, "simgpu.state"),
            "SIMGPU_DEVICES": "name=NVIDIA H200,memory=16Gi,sms=132,cc=9.0",
            "XDG_RUNTIME_DIR": xdg,
        })
        for name in ["TESSERA_MEMORY_LIMIT", "TESSERA_CORES_LIMIT", "TESSERA_SHARE_DIR"]:
            env.pop(name, None)

        def run(*command, environment=None):
            return subprocess.run([args.tessera, "run", *command], env=environment or env,
                                  capture_output=True, text=True, timeout=60)

        def shares():
            return sorted(os.listdir(root)) if os.path.isdir(root) else []

        # ---- exit status: each code --help documents, produced by its situation ----------------
        helped = run("--help")
        if helped.returncode != 0:
            fail(f"--help exited {helped.returncode}")
        section = helped.stdout.split("Exit status:", 1)
        if len(section) != 2:
            fail(f"--help documents no exit status:\n{helped.stdout}")
        documented = re.findall(r"^  (\S+)\s{2,}\S", section[1], re.MULTILINE)
        not_executable = os.path.join(work, "not-executable")
        with open(not_executable, "w") as f:
            f.write("#!/bin/sh\nexit 0\n")
        os.chmod(not_executable, 0o644)
        situations = {
            "N": (["--", "sh", "-c", "exit 7"], 7),
            "125": (["--memory", "lots", "--", "true"], 125),
            "126": (["--", not_executable], 126),
            "127": (["--", "/no/such/program"], 127),
            "128+N": (["--", "sh", "-c", "kill -TERM $$"], 128 + signal.SIGTERM),
        }
        if sorted(documented) != sorted(situations):
            fail(f"--help documents {documented}, the test knows {sorted(situations)}")
        for code, (command, expected) in situations.items():
            done = run(*command)
            if done.returncode != expected:
                fail(f"exit status {code}: {command} exited {done.returncode}, expected "
                     f"{expected}: {done.stderr!r}")
        # An unknown flag is tessera's own failure too.
        done = run("--no-such-flag", "--", "true")
        if done.returncode != 125:
            fail(f"an unknown flag exited {done.returncode}, expected 125")

        # ---- fail closed: nothing runs, nothing is created -------------------------------------
        marker = os.path.join(work, "ran")
        before = shares()
        fake = os.path.join(work, "fake")
        os.mkdir(fake)
        cases = [(["--libvgpu", "/etc/passwd"], ["/etc/passwd", "no ELF header",
                                                 "without the shim"])]
        for name, header, why in [("exec.so", elf_header(elf_type=2), "not a shared library"),
                                  ("lib32.so", elf_header(elf_class=1), "32-bit"),
                                  ("arm.so", elf_header(machine=183), "ELF machine 183")]:
            path = os.path.join(fake, name)
            with open(path, "wb") as f:
                f.write(header)
            cases.append((["--libvgpu", path], [path, why]))
        cases.append((["--libvgpu", os.path.join(fake, "missing.so")], ["not found"]))
        with open("/bin/true", "rb") as f:  # ET_DYN as a PIE: ld.so would not preload it
            if f.read(18)[16] == 3:
                cases.append((["--libvgpu", "/bin/true"], ["/bin/true",
                                                            "position-independent executable"]))
        for flag in ["--memory", "--memory-limit", "--cores", "--cores-limit", "--priority"]:
            cases.append(([flag, ""], [flag, "empty value"]))
        # --cores-burst is --cores-limit's old name: its errors name the new one.
        cases.append((["--cores-burst", ""], ["--cores-limit", "empty value"]))
        for flag, value in [("--memory", "8Gx"), ("--memory", "-1"), ("--memory", "0=abc"),
                            ("--cores", "abc"), ("--cores", "150"), ("--cores", "30%"),
                            ("--cores", "0="), ("--cores-limit", "x"), ("--cores-limit", "0"),
                            ("--memory-limit", "-1Gi"), ("--priority", "urgent")]:
            cases.append(([flag, value], [f"{flag} '{value}'"]))
        cases.append((["--cores-burst", "x"], ["--cores-limit 'x'"]))
        for flags, expected in cases:
            done = run(*flags, "--", "touch", marker)
            missing = [text for text in expected if text not in done.stderr]
            if done.returncode != 125 or missing:
                fail(f"{flags}: exit {done.returncode}, stderr {done.stderr!r} lacks {missing}")
            if len(done.stderr.strip().splitlines()) != 1:
                fail(f"{flags}: more than one line: {done.stderr!r}")
            if os.path.exists(marker):
                fail(f"{flags}: the command ran")
        if shares() != before:
            fail(f"a refused run left shares: {sorted(set(shares()) - set(before))}")

        # ---- where the share lives ---------------------------------------------------------------
        done = run("--", "sh", "-c", 'echo "$TESSERA_SHARE_DIR"; cat "$TESSERA_SHARE_DIR/owner"; '
                   'echo "$PPID"')
        lines = done.stdout.splitlines()
        if done.returncode != 0 or len(lines) != 3:
            fail(f"share location: exit {done.returncode}: {done.stdout!r} {done.stderr!r}")
        share_dir, owner, parent = lines
        if os.path.dirname(share_dir) != root:
            fail(f"the share {share_dir} is not under {root}")
        owner_pid, owner_start = owner.split()
        if owner_pid != parent or not owner_start.isdigit():
            fail(f"owner file {owner!r}: expected tessera's pid {parent} and a start time")
        for folder in [os.path.dirname(root), root]:
            info = os.lstat(folder)
            if not stat.S_ISDIR(info.st_mode) or stat.S_IMODE(info.st_mode) != 0o700 \
                    or info.st_uid != os.getuid():
                fail(f"{folder}: mode {oct(info.st_mode)}, uid {info.st_uid}")
        if os.path.exists(share_dir):
            fail(f"the temporary share {share_dir} was not removed")

        # A root folder that is a symlink, or open to others, is refused.
        def open_folder(parent):
            os.mkdir(os.path.join(parent, "tessera"))
            os.chmod(os.path.join(parent, "tessera"), 0o755)

        for name, prepare, why in [
                ("link", lambda d: os.symlink(work, os.path.join(d, "tessera")), "symlink"),
                ("open", open_folder, "mode 0755")]:
            other = os.path.join(work, f"xdg-{name}")
            os.mkdir(other, 0o700)
            prepare(other)
            done = run("--", "touch", marker, environment=dict(env, XDG_RUNTIME_DIR=other))
            if done.returncode != 125 or why not in done.stderr or os.path.exists(marker):
                fail(f"root {name}: exit {done.returncode}, stderr {done.stderr!r}")

        # ---- SIGKILL of tessera: the command dies with it; the next run cleans up --------------
        tessera = subprocess.Popen([args.tessera, "run", "--", "sh", "-c", 'echo "$$"; '
                                    'echo "$TESSERA_SHARE_DIR"; exec sleep 60'],
                                   env=env, stdout=subprocess.PIPE, text=True)
        child = int(tessera.stdout.readline())
        stale = tessera.stdout.readline().strip()
        if not os.path.isdir(stale):
            fail(f"the running share {stale} does not exist")
        killed_at = time.monotonic()
        tessera.kill()
        tessera.wait()
        # The kernel kills it with tessera (PR_SET_PDEATHSIG): at once, give or take a loaded
        # machine's scheduling, so 30 s is a liveness bound (the time is printed, not judged).
        while not gone(child) and time.monotonic() - killed_at < 30.0:
            time.sleep(0.01)
        if not gone(child):
            os.kill(child, signal.SIGKILL)
            fail("the command outlived a SIGKILLed tessera by 30 s")
        print(f"FIGURE command gone {1000 * (time.monotonic() - killed_at):.0f} ms after "
              f"tessera's SIGKILL")
        if not os.path.isdir(stale):
            fail("the SIGKILLed tessera's share folder is already gone (nothing to clean up)")
        done = run("--", "true")
        said = [line for line in done.stderr.splitlines() if "stale" in line]
        if done.returncode != 0 or os.path.exists(stale) or len(said) != 1 or stale not in said[0]:
            fail(f"the next run did not remove {stale} in one line: exit {done.returncode}, "
                 f"stderr {done.stderr!r}")
        # A share kept with --share-dir is never removed.
        kept = os.path.join(work, "kept")
        if run("--share-dir", kept, "--", "true").returncode != 0 or not os.path.isdir(kept):
            fail("--share-dir share not kept")
        if shares():
            fail(f"shares left behind: {shares()}")
    print("PASS")


if __name__ == "__main__":
    main()
